//! [`setters!`]: the builders' setters that store their argument and hand the builder back.

/// `pub fn max_bytes(bytes: u64) => max_bytes = bytes;` is
/// `pub fn max_bytes(mut self, bytes: u64) -> Self { self.max_bytes = bytes; self }`; the
/// field may be a path (`settings.name = name.into()`) and the argument may be left out
/// (`pub fn share_by_key_only() => share_by_key_only = true;`). Docs and attributes are kept.
macro_rules! setters {
    (
        $(
            $(#[$attr:meta])*
            $vis:vis fn $setter:ident($($arg:ident: $ty:ty)?) => $($field:ident).+ = $value:expr;
        )*
    ) => {
        $(
            $(#[$attr])*
            $vis fn $setter(mut self $(, $arg: $ty)?) -> Self {
                self.$($field).+ = $value;
                self
            }
        )*
    };
}

pub(crate) use setters;
