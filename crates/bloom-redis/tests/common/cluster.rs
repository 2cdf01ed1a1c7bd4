//! A throwaway **Redis Cluster** for the tests: `nodes` real `redis-server` processes in
//! cluster mode on 127.0.0.1, each in its own temp dir, saving only when told to
//! (`save_dump`, then `restart_from`: a node back from an old dump), joined by
//! `redis-cli --cluster create` with no replicas (fewer than 3 nodes, which `redis-cli`
//! refuses, are joined by hand: `CLUSTER ADDSLOTSRANGE` and `CLUSTER MEET`).
//!
//! Std and `tempfile` only, like `common/mod.rs` (whose loud skip, or failure when
//! `CI=true`, it repeats when `redis-server` or `redis-cli` is missing). It shells out to
//! `kill` for `pause`/`resume` because `unsafe` (for `libc::kill`) is forbidden, and talks to
//! the nodes itself through a tiny RESP client with a read timeout, so a hung node fails a
//! query instead of hanging the test. Include it with
//! `#[path = "common/cluster.rs"] mod cluster;`.
//!
//! Ports: every node needs its port P and its cluster bus P + 10000 free. They are drawn from
//! `PORTS` (bus ports end at 32767, below Linux's default ephemeral range 32768-60999, so
//! outgoing connections never take them), probed by binding both, and a node whose port was
//! taken in between anyway (another process) is started again on another one.

#![allow(dead_code)]

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::common::signal;

/// Client ports tried (the bus adds `BUS_OFFSET`).
const PORTS: RangeInclusive<u16> = 10000..=22767;
/// Redis's fixed offset from a node's port to its cluster bus port.
const BUS_OFFSET: u16 = 10000;
/// Every slot of a Redis Cluster.
const SLOTS: u32 = 16384;
/// How long a node may take to answer PING after its spawn.
const NODE_START: Duration = Duration::from_secs(10);
/// How long the joined cluster may take until every node reports it whole and healthy.
const CLUSTER_OK: Duration = Duration::from_secs(20);
/// Read/write timeout of one query to one node.
const QUERY: Duration = Duration::from_secs(5);
/// Fresh ports tried for one node whose port turned out taken.
const PORT_RETRIES: usize = 10;

/// Ports handed to live clusters of this process (two clusters starting at once must not
/// probe the same port free and both use it).
static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// One `redis-server --cluster-enabled yes`.
struct Node {
    child: Child,
    port: u16,
    /// Its `--dir` (holds `nodes-P.conf` and `redis.log`).
    dir: PathBuf,
    /// SIGSTOPped by `pause` and not yet resumed.
    paused: bool,
}

/// A running Redis Cluster; every node is resumed if paused, SIGKILLed and waited for on drop.
pub struct RedisCluster {
    nodes: Vec<Node>,
    /// Parent of every node's dir (removed on drop, after the nodes).
    dir: tempfile::TempDir,
}

/// Starts `nodes` cluster nodes, joins them (no replicas, every slot assigned) and waits
/// until every node reports `cluster_state:ok` and the same full slot map.
///
/// `None` (after a loud message) when `redis-server` or `redis-cli` is not installed, unless
/// `CI=true`, where that is a failure. Panics, with the reason, when the cluster cannot be
/// built here.
pub fn start_cluster(nodes: usize) -> Option<RedisCluster> {
    assert!(nodes >= 1, "a cluster needs at least one node");
    for tool in ["redis-server", "redis-cli"] {
        if !installed(tool) {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("{tool} is not installed, and CI=true requires these tests to run");
            }
            eprintln!("\n*** SKIPPED: {tool} not installed (apt-get install redis-server) ***\n");
            return None;
        }
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut cluster = RedisCluster {
        nodes: Vec::with_capacity(nodes),
        dir,
    };
    let ports = free_ports(nodes);
    for port in ports {
        let node = cluster.spawn_node(port);
        cluster.nodes.push(node);
    }
    cluster.join();
    cluster.wait_until_ok();
    Some(cluster)
}

impl RedisCluster {
    /// `redis://127.0.0.1:P/` of the first node (a client discovers the rest from it).
    pub fn seed_url(&self) -> String {
        url(self.nodes[0].port)
    }

    /// `redis://127.0.0.1:P/` of every node, in node order.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| url(n.port)).collect()
    }

    /// Every node's port, in node order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The process id of node `node`.
    pub fn pid(&self, node: usize) -> u32 {
        self.nodes[node].child.id()
    }

    /// Every key stored on node `node` (`KEYS *` on that node alone), sorted.
    pub fn keys_on(&self, node: usize) -> Vec<String> {
        let reply = self.query(node, &["KEYS", "*"]);
        let mut keys: Vec<String> = reply
            .array()
            .iter()
            .map(|k| String::from_utf8_lossy(k.bulk()).into_owned())
            .collect();
        keys.sort();
        keys
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, so hash tags count as Redis counts them).
    pub fn slot_of(&self, key: &str) -> u16 {
        let node = self.answering_node();
        let slot = self.query(node, &["CLUSTER", "KEYSLOT", key]).int();
        u16::try_from(slot).expect("a slot fits in u16")
    }

    /// Which node (index) serves the slot of `key`, by `CLUSTER KEYSLOT` and `CLUSTER SLOTS`.
    pub fn node_of_key(&self, key: &str) -> usize {
        let slot = self.slot_of(key);
        self.slot_ranges()
            .into_iter()
            .find(|&(start, end, _)| (start..=end).contains(&slot))
            .map(|(_, _, node)| node)
            .unwrap_or_else(|| panic!("no node serves slot {slot} (of key {key:?})"))
    }

    /// The slot map, as `(first slot, last slot, node index)` sorted by first slot, from
    /// `CLUSTER SLOTS` of the first node not paused.
    pub fn slot_ranges(&self) -> Vec<(u16, u16, usize)> {
        let node = self.answering_node();
        slot_map(
            self.nodes[node].port,
            &self.query(node, &["CLUSTER", "SLOTS"]),
        )
        .into_iter()
        .map(|(start, end, port)| {
            let owner = self
                .nodes
                .iter()
                .position(|n| n.port == port)
                .unwrap_or_else(|| panic!("slots {start}-{end} served by unknown port {port}"));
            (start, end, owner)
        })
        .collect()
    }

    /// SIGSTOP node `node`: frozen, but the kernel still accepts and buffers its connections
    /// (clients and the other nodes see it hang, and after the node timeout, fail).
    pub fn pause(&mut self, node: usize) {
        let node = &mut self.nodes[node];
        signal(node.child.id(), "-STOP");
        node.paused = true;
    }

    /// SIGCONT node `node`.
    pub fn resume(&mut self, node: usize) {
        let node = &mut self.nodes[node];
        signal(node.child.id(), "-CONT");
        node.paused = false;
    }

    /// Runs `redis-cli -h 127.0.0.1 -p P <args>` against node `node` and returns its stdout
    /// (pass `-c` first in `args` to follow `MOVED`/`ASK`). Panics if `redis-cli` fails;
    /// hangs on a paused node, as `redis-cli` has no reply timeout.
    pub fn cli(&self, node: usize, args: &[&str]) -> String {
        let port = self.nodes[node].port.to_string();
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli");
        assert!(
            output.status.success(),
            "redis-cli -p {port} {args:?} failed ({}):\n{}",
            output.status,
            both(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `SAVE` on node `node`, and a copy of its `dump.rdb`, for [`restart_from`] later: "an
    /// old dump" of that node's slots.
    pub fn save_dump(&self, node: usize) -> PathBuf {
        assert!(matches!(self.query(node, &["SAVE"]), Reply::Simple(_)));
        let dir = &self.nodes[node].dir;
        let copy = dir.with_extension(format!("saved-{}.rdb", self.nodes[node].port));
        std::fs::copy(dir.join("dump.rdb"), &copy).expect("copy dump.rdb");
        copy
    }

    /// SIGKILLs node `node` and starts it again on its port and in its dir (its
    /// `nodes-P.conf`: the same node id and slots) loading `dump`; waits until the cluster
    /// is whole again. Within the node timeout, no other node marks it failed.
    pub fn restart_from(&mut self, node: usize, dump: &std::path::Path) {
        let (port, dir) = (self.nodes[node].port, self.nodes[node].dir.clone());
        let _ = self.nodes[node].child.kill();
        let _ = self.nodes[node].child.wait();
        std::fs::copy(dump, dir.join("dump.rdb")).expect("copy the dump in");
        let mut restarted = Node {
            child: spawn_server(port, &dir),
            port,
            dir,
            paused: false,
        };
        if let Err(log) = restarted.wait_for_pong() {
            panic!("redis-server on port {port} did not start again:\n{log}");
        }
        self.nodes[node] = restarted;
        self.wait_until_ok();
    }

    /// Spawns a node on `port` (or, if that port was taken meanwhile, on fresh ones) and
    /// waits for its PONG.
    fn spawn_node(&self, mut port: u16) -> Node {
        for _ in 0..PORT_RETRIES {
            let dir = tempfile::tempdir_in(self.dir.path())
                .expect("a node dir")
                .keep();
            let mut node = Node {
                child: spawn_server(port, &dir),
                port,
                dir,
                paused: false,
            };
            match node.wait_for_pong() {
                Ok(()) => return node,
                Err(log_text) if log_text.contains("Address already in use") => {
                    release(&[port]);
                    port = free_ports(1)[0];
                }
                Err(log_text) => panic!("redis-server on port {port} did not start:\n{log_text}"),
            }
        }
        panic!(
            "no free port pair (P, P + {BUS_OFFSET}) for a cluster node after {PORT_RETRIES} tries"
        );
    }

    /// Joins the nodes into one cluster: `redis-cli --cluster create` (3 nodes or more), or
    /// by hand (fewer, which `redis-cli` refuses).
    fn join(&self) {
        if self.nodes.len() >= 3 {
            let addrs: Vec<String> = self
                .nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port))
                .collect();
            let output = Command::new("redis-cli")
                .args(["--cluster", "create"])
                .args(&addrs)
                .args(["--cluster-replicas", "0", "--cluster-yes"])
                .stdin(Stdio::null())
                .output()
                .expect("run redis-cli --cluster create");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && stdout.contains("All 16384 slots covered"),
                "redis-cli --cluster create {} failed ({}):\n{}",
                addrs.join(" "),
                output.status,
                both(&output)
            );
            return;
        }
        let count = self.nodes.len() as u32;
        for (i, node) in self.nodes.iter().enumerate() {
            let i = i as u32;
            let first = (SLOTS * i / count).to_string();
            let last = (SLOTS * (i + 1) / count - 1).to_string();
            self.query_ok(node.port, &["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
        }
        let seed = self.nodes[0].port.to_string();
        for node in &self.nodes[1..] {
            self.query_ok(node.port, &["CLUSTER", "MEET", "127.0.0.1", &seed]);
        }
    }

    /// Waits (`CLUSTER_OK` at most) until every node reports `cluster_state:ok`, all 16384
    /// slots assigned, every node known, and the same full slot map as every other node.
    fn wait_until_ok(&self) {
        let deadline = Instant::now() + CLUSTER_OK;
        loop {
            let problem = match self.health() {
                Ok(()) => return,
                Err(problem) => problem,
            };
            if Instant::now() >= deadline {
                let logs: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("--- node on port {} ---\n{}", n.port, n.log_tail()))
                    .collect();
                panic!(
                    "the Redis Cluster on ports {:?} was not healthy after {CLUSTER_OK:?}: \
                     {problem}\n{}",
                    self.ports(),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `Err(what is wrong)` unless every node reports the cluster whole, healthy, and alike.
    fn health(&self) -> Result<(), String> {
        let mut first_map: Option<Vec<(u16, u16, u16)>> = None;
        for node in &self.nodes {
            let port = node.port;
            let info = command(port, &["CLUSTER", "INFO"]).map_err(|e| format!("{port}: {e}"))?;
            let info = String::from_utf8_lossy(info.bulk()).into_owned();
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
                    .unwrap_or("")
                    .to_owned()
            };
            let (state, assigned, known) = (
                field("cluster_state"),
                field("cluster_slots_assigned"),
                field("cluster_known_nodes"),
            );
            if state != "ok"
                || assigned != SLOTS.to_string()
                || known != self.nodes.len().to_string()
            {
                return Err(format!(
                    "node {port} reports cluster_state:{state} cluster_slots_assigned:{assigned} \
                     cluster_known_nodes:{known}"
                ));
            }
            let slots = command(port, &["CLUSTER", "SLOTS"]).map_err(|e| format!("{port}: {e}"))?;
            let map = slot_map(port, &slots);
            let covered: u32 = map.iter().map(|&(s, e, _)| u32::from(e - s) + 1).sum();
            if covered != SLOTS {
                return Err(format!("node {port} maps {covered} slots: {map:?}"));
            }
            match &first_map {
                None => first_map = Some(map),
                Some(first) if *first != map => {
                    return Err(format!(
                        "node {port} maps slots as {map:?}, node {} as {first:?}",
                        self.nodes[0].port
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// The first node not paused (to ask about the cluster as a whole).
    fn answering_node(&self) -> usize {
        self.nodes
            .iter()
            .position(|n| !n.paused)
            .expect("every node is paused")
    }

    /// One command to node `node`; panics on a connection failure or an error reply.
    fn query(&self, node: usize, args: &[&str]) -> Reply {
        let port = self.nodes[node].port;
        match command(port, args) {
            Ok(Reply::Error(e)) => panic!("{args:?} on node {node} (port {port}): {e}"),
            Ok(reply) => reply,
            Err(e) => panic!("{args:?} on node {node} (port {port}): {e}"),
        }
    }

    /// One command to `port` that must answer `+OK`.
    fn query_ok(&self, port: u16, args: &[&str]) {
        match command(port, args) {
            Ok(Reply::Simple(ok)) if ok == "OK" => {}
            other => panic!("{args:?} on port {port}: {other:?}"),
        }
    }
}

/// `redis-server` in cluster mode on `port`, in `dir` (its log, `nodes-P.conf`, and the
/// `dump.rdb` it loads if there is one; it saves only when told to).
fn spawn_server(port: u16, dir: &std::path::Path) -> Child {
    let log = dir.join("redis.log");
    let out = File::options()
        .create(true)
        .append(true)
        .open(&log)
        .expect("a node log");
    let err = out.try_clone().expect("a node log");
    Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
        .args(["--cluster-node-timeout", "2000"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn redis-server")
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if node.paused {
                signal(node.child.id(), "-CONT");
                node.paused = false;
            }
            let _ = node.child.kill();
            let _ = node.child.wait();
        }
        release(&self.ports());
    }
}

impl Node {
    /// Waits for PONG; `Err(its log)` if it exits first (or never answers).
    fn wait_for_pong(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + NODE_START;
        loop {
            if matches!(command(self.port, &["PING"]), Ok(Reply::Simple(ref s)) if s == "PONG") {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited ({status}):\n{}", self.log_tail()));
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(format!(
                    "no PONG after {NODE_START:?}:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last lines of its log.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

fn url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

fn installed(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `count` ports P from `PORTS`, starting at a random one, with P and P + `BUS_OFFSET` both
/// free now on 127.0.0.1 and not handed out to another cluster of this process.
fn free_ports(count: usize) -> Vec<u16> {
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    let span = u32::from(PORTS.end() - PORTS.start()) + 1;
    let offset = {
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        (h.finish() % u64::from(span)) as u32
    };
    let mut ports = Vec::with_capacity(count);
    // Held until all are chosen, so no port is chosen twice.
    let mut probes = Vec::new();
    for i in 0..span {
        if ports.len() == count {
            break;
        }
        let port = PORTS.start() + ((offset + i) % span) as u16;
        if taken.contains(&port) {
            continue;
        }
        let (Ok(a), Ok(b)) = (
            TcpListener::bind(("127.0.0.1", port)),
            TcpListener::bind(("127.0.0.1", port + BUS_OFFSET)),
        ) else {
            continue;
        };
        probes.push((a, b));
        ports.push(port);
    }
    assert_eq!(
        ports.len(),
        count,
        "only {} of {count} free port pairs (P, P + {BUS_OFFSET}) with P in {PORTS:?}",
        ports.len()
    );
    taken.extend(&ports);
    drop(probes);
    ports
}

/// Gives ports back (their cluster is gone).
fn release(ports: &[u16]) {
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(taken) = taken.as_mut() {
        for port in ports {
            taken.remove(port);
        }
    }
}

/// `CLUSTER SLOTS` (asked of port `who`) as `(first, last, master port)` sorted by first slot.
fn slot_map(who: u16, reply: &Reply) -> Vec<(u16, u16, u16)> {
    let slot = |r: &Reply| u16::try_from(r.int()).expect("a slot fits in u16");
    let mut map: Vec<(u16, u16, u16)> = reply
        .array()
        .iter()
        .map(|range| match range.array() {
            [start, end, master, ..] => {
                let port = match master.array() {
                    [_ip, port, ..] => u16::try_from(port.int()).expect("a port fits in u16"),
                    other => panic!("CLUSTER SLOTS from {who}: bad master entry {other:?}"),
                };
                (slot(start), slot(end), port)
            }
            other => panic!("CLUSTER SLOTS from {who}: bad range {other:?}"),
        })
        .collect();
    map.sort_unstable();
    map
}

/// A command's stdout and stderr, for panic messages.
fn both(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A RESP2 reply.
#[derive(Debug)]
enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    fn int(&self) -> i64 {
        match self {
            Reply::Int(i) => *i,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    fn bulk(&self) -> &[u8] {
        match self {
            Reply::Bulk(Some(b)) => b,
            other => panic!("expected a bulk string reply, got {other:?}"),
        }
    }

    fn array(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(a)) => a,
            Reply::Array(None) => &[],
            other => panic!("expected an array reply, got {other:?}"),
        }
    }
}

/// One command to 127.0.0.1:`port` on a fresh connection (`QUERY` timeouts); `Err` on a
/// connection or protocol failure (an error reply is `Ok(Reply::Error)`).
fn command(port: u16, args: &[&str]) -> Result<Reply, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(QUERY))
        .and_then(|()| stream.set_write_timeout(Some(QUERY)))
        .map_err(|e| e.to_string())?;
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    stream.write_all(&request).map_err(|e| e.to_string())?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut BufReader<TcpStream>) -> Result<Reply, String> {
    let mut line = Vec::new();
    reader
        .read_until(b'\n', &mut line)
        .map_err(|e| e.to_string())?;
    let Some(line) = line.strip_suffix(b"\r\n") else {
        return Err(format!(
            "truncated reply line {:?}",
            String::from_utf8_lossy(&line)
        ));
    };
    let (kind, rest) = line.split_first().ok_or("an empty reply line")?;
    let rest = String::from_utf8_lossy(rest).into_owned();
    let len = || {
        rest.parse::<i64>()
            .map_err(|e| format!("bad length {rest:?}: {e}"))
    };
    Ok(match kind {
        b'+' => Reply::Simple(rest),
        b'-' => Reply::Error(rest),
        b':' => Reply::Int(len()?),
        b'$' => match usize::try_from(len()?) {
            Err(_) => Reply::Bulk(None),
            Ok(n) => {
                let mut data = vec![0; n + 2];
                reader.read_exact(&mut data).map_err(|e| e.to_string())?;
                data.truncate(n);
                Reply::Bulk(Some(data))
            }
        },
        b'*' => match usize::try_from(len()?) {
            Err(_) => Reply::Array(None),
            Ok(n) => Reply::Array(Some(
                (0..n)
                    .map(|_| read_reply(reader))
                    .collect::<Result<_, _>>()?,
            )),
        },
        other => return Err(format!("unknown reply type {:?}", *other as char)),
    })
}
