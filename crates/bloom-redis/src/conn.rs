//! One connection type for a single Redis and for a Redis Cluster: the sync code runs the
//! same commands on either. On a cluster every script and pipeline it sends touches one hash
//! slot (see [`Keys`](crate::protocol::Keys)), so each is routed whole to one node.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::{Error, RedisSyncBuilder};

/// A multiplexed connection that reconnects by itself: concurrent commands share it.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    pub(crate) async fn open(cfg: &RedisSyncBuilder) -> Result<Self, Error> {
        if cfg.cluster {
            let client = ClusterClient::builder(vec![&*cfg.url])
                .connection_timeout(cfg.response_timeout)
                .response_timeout(cfg.response_timeout)
                .retries(1)
                .max_retry_wait(200)
                .build()?;
            Ok(Self::Cluster(client.get_async_connection().await?))
        } else {
            let client = redis::Client::open(&*cfg.url)?;
            let manager = ConnectionManagerConfig::new()
                .set_connection_timeout(cfg.response_timeout)
                .set_response_timeout(cfg.response_timeout)
                .set_number_of_retries(1)
                .set_max_delay(200);
            Ok(Self::Single(
                ConnectionManager::new_with_config(client, manager).await?,
            ))
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}
