//! The engine seam: one connection type ([`Conn`]) over SQLite (`rusqlite`) or PostgreSQL (the
//! sync `postgres` client), so every statement of `src/db/` is written once.
//!
//! Statements are written in SQLite's dialect with numbered placeholders (`?1`) and portable
//! SQL (`ON CONFLICT ... DO`, `RETURNING`, `COALESCE`, `CASE`); for PostgreSQL `?N` becomes
//! `$N` and SQLite's `strftime` timestamp becomes the same text from `to_char`
//! ([`postgres_sql`], cached with the prepared statement). Values cross the seam as [`Value`]
//! (null, integer, text: the only types the schema uses) and rows come back as [`Row`], so the
//! decoders of `rows.rs` and the other files know neither engine.
//!
//! Transactions are [`Tx`]: `BEGIN`, the caller's statements, then at commit the changes it
//! recorded ([`Tx::changed`]) go to `change_log` under one `seq` range taken from the one-row
//! `change_counter` in the same transaction (its row lock orders writers, so `seq` follows
//! commit order), with `pg_notify('bootvol_changes', seq)` on PostgreSQL. A dropped `Tx`
//! rolls back.
//!
//! A lost PostgreSQL connection is reopened at the next use, at most once a second; until then
//! every use fails with [`DbError::Unavailable`] (the API answers 503).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::DbError;

/// How long change-log rows are kept (seconds). A reader further behind rebuilds from scratch.
pub const CHANGE_LOG_RETENTION_SECS: i64 = 24 * 3600;

/// SQLite's timestamp text, as the schema's defaults write it.
const SQLITE_NOW: &str = "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')";
/// The same text on PostgreSQL (`2026-12-01T20:15:11.123+00:00`).
const POSTGRES_NOW: &str =
    "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"+00:00\"')";

/// A value crossing the seam.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(s.to_owned())
    }
}
impl From<&String> for Value {
    fn from(s: &String) -> Value {
        Value::Text(s.clone())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(i)
    }
}
impl From<&i64> for Value {
    fn from(i: &i64) -> Value {
        Value::Int(*i)
    }
}
impl From<u32> for Value {
    fn from(i: u32) -> Value {
        Value::Int(i64::from(i))
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Int(i64::from(b))
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}
impl From<&Option<String>> for Value {
    fn from(v: &Option<String>) -> Value {
        v.as_deref().map_or(Value::Null, Value::from)
    }
}

/// Statement arguments: `args![a, b]`.
macro_rules! args {
    ($($x:expr),* $(,)?) => { &[$($crate::engine::Value::from($x)),*][..] };
}
pub(crate) use args;

/// A result row.
#[derive(Debug, Clone)]
pub struct Row(Vec<Value>);

/// What a column can be read as.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> Option<Self>;
}
impl FromValue for i64 {
    fn from_value(v: &Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> Option<String> {
        match v {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Option<Option<T>> {
        match v {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

impl Row {
    /// Every column.
    pub(crate) fn all(&self) -> &[Value] {
        &self.0
    }

    /// Column `i` as `T`; a missing column or another type is a corrupt row.
    pub fn get<T: FromValue>(&self, i: usize) -> Result<T, DbError> {
        let value = self.0.get(i).ok_or_else(|| type_error(i, "no such column"))?;
        T::from_value(value).ok_or_else(|| type_error(i, &format!("unexpected value {value:?}")))
    }
}

fn type_error(i: usize, message: &str) -> DbError {
    DbError::Corrupt { table: "(query)", key: format!("column {i}"), message: message.to_owned() }
}

/// Which engine, and how to reach it.
#[derive(Debug, Clone)]
pub enum Target {
    Sqlite(std::path::PathBuf),
    Postgres(Arc<PostgresTarget>),
}

impl Target {
    /// The database `[database]` names; the password file and the CA file are read here.
    pub fn from_config(section: &bootvol_core::config::DatabaseSection) -> Result<Target, String> {
        match &section.url {
            None => Ok(Target::Sqlite(section.path.clone())),
            Some(url) => Ok(Target::Postgres(Arc::new(PostgresTarget::new(
                url,
                section.password_file.as_deref(),
                section.ca_file.as_deref(),
            )?))),
        }
    }

    /// For `check-config`: the engine and where it is.
    pub fn describe(&self) -> String {
        match self {
            Target::Sqlite(path) => format!("database: SQLite {}", path.display()),
            Target::Postgres(pg) => format!(
                "database: PostgreSQL {} ({})",
                pg.shown,
                if pg.tls.is_some() {
                    "TLS required, server certificate checked against ca_file; \
                     a server that declines TLS is refused"
                } else if pg.config.get_password().is_some() {
                    "no TLS: a local socket, the password sent over it"
                } else {
                    "no TLS, no password"
                }
            ),
        }
    }
}

/// A PostgreSQL server: its parsed URL (with the password from `password_file`) and, with
/// `ca_file`, the TLS configuration (TLS then required: `sslmode` is forced to `require`).
pub struct PostgresTarget {
    pub config: tokio_postgres::Config,
    pub tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    /// The URL without its password, for messages.
    pub shown: String,
}

impl std::fmt::Debug for PostgresTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl PostgresTarget {
    /// Parses `url`, adds the password read from `password_file` and, with `ca_file`, a rustls
    /// configuration that trusts its certificates only.
    ///
    /// `ca_file` means TLS is required and the server's certificate (and host name) verified:
    /// `sslmode` absent or `prefer` becomes `require`, so a server (or a host on the path) that
    /// answers "no TLS" is refused instead of getting a plain connection; `sslmode=disable`
    /// with `ca_file` is refused as a contradiction. A password is never sent in clear text:
    /// without TLS, the server may ask for it in clear (and a host on the path can always ask),
    /// so a password without `ca_file` is refused unless every host is a Unix socket.
    pub fn new(
        url: &str,
        password_file: Option<&Path>,
        ca_file: Option<&Path>,
    ) -> Result<PostgresTarget, String> {
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| format!("database.url: {}", with_causes(&e)))?;
        if config.get_password().is_some() {
            return Err("database.url: carries a password; put it in database.password_file".into());
        }
        if let Some(file) = password_file {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("database.password_file: {}: {e}", file.display()))?;
            config.password(text.trim_end_matches(['\n', '\r']));
        }
        config.connect_timeout(Duration::from_secs(5));
        config.keepalives_idle(Duration::from_secs(10));
        // tokio-postgres parses sslmode=disable|prefer|require (prefer when absent). With a CA
        // file TLS is required (`prefer` would fall back to plain text when the server declines);
        // without one there is nothing to check a server against: TLS is off, `require` refused.
        use tokio_postgres::config::SslMode;
        let tls = match (config.get_ssl_mode(), ca_file) {
            (SslMode::Disable, Some(_)) => {
                return Err("database.ca_file: set, but database.url says sslmode=disable; \
                     ca_file means TLS is required"
                    .into());
            }
            (_, Some(ca)) => {
                config.ssl_mode(SslMode::Require);
                Some(tls_connector(ca)?)
            }
            (SslMode::Require, None) => {
                return Err("database.ca_file: required with sslmode=require".into());
            }
            (_, None) => {
                config.ssl_mode(SslMode::Disable);
                None
            }
        };
        // Local: every host a Unix socket, and no `hostaddr` (a TCP address) beside them.
        let hosts = config.get_hosts();
        let local = !hosts.is_empty()
            && config.get_hostaddrs().is_empty()
            && hosts.iter().all(|h| matches!(h, tokio_postgres::config::Host::Unix(_)));
        if tls.is_none() && config.get_password().is_some() && !local {
            return Err("database.password_file: needs database.ca_file (TLS) for a server \
                 over TCP: without TLS the password could go out in clear text"
                .into());
        }
        let mut shown = url.to_owned();
        if let Some(at) = shown.find('@') {
            let scheme = shown.find("://").map_or(0, |i| i + 3);
            if let Some(colon) = shown[scheme..at].find(':') {
                shown.replace_range(scheme + colon..at, "");
            }
        }
        Ok(PostgresTarget { config, tls, shown })
    }

    /// The sync client's configuration of the same server.
    fn sync_config(&self) -> postgres::Config {
        postgres::Config::from(self.config.clone())
    }
}

fn tls_connector(ca: &Path) -> Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca)
        .map_err(|e| format!("database.ca_file: {}: {e}", ca.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("database.ca_file: {}: {e}", ca.display()))?;
        roots.add(cert).map_err(|e| format!("database.ca_file: {}: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("database.ca_file: {}: no certificate", ca.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("database.ca_file: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// Opens a PostgreSQL client (sync), from any thread.
pub fn connect_postgres(target: &PostgresTarget) -> Result<postgres::Client, postgres::Error> {
    off_runtime(|| match &target.tls {
        Some(tls) => target.sync_config().connect(tls.clone()),
        None => target.sync_config().connect(postgres::NoTls),
    })
}

/// Creates database `name` (letters, digits and `_` only) on the server of `admin_url` unless
/// it exists; for tests and `migrate-to-postgres`.
pub fn create_database(
    admin_url: &str,
    password_file: Option<&Path>,
    name: &str,
) -> Result<(), DbError> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(DbError::Config(format!("{name:?} is not a plain database name")));
    }
    let target = PostgresTarget::new(admin_url, password_file, None).map_err(DbError::Config)?;
    // Connected, used and closed off any runtime (closing blocks).
    off_runtime(|| {
        let mut client = connect_postgres(&target)?;
        let exists = client.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])?;
        if exists.is_none() {
            client.batch_execute(&format!("CREATE DATABASE {name}"))?;
        }
        Ok(())
    })
    .map_err(pg_error)
}

/// Runs `f` where the sync `postgres` client may block: on this thread when no tokio runtime
/// is entered here, else on a scoped thread (its own runtime cannot start inside another).
fn off_runtime<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| s.spawn(f).join().expect("database thread panicked"))
}

/// An open connection.
pub(crate) enum Conn {
    Sqlite(rusqlite::Connection),
    Postgres(Box<RefCell<Pg>>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Sqlite(_) => f.write_str("Conn::Sqlite"),
            Conn::Postgres(pg) => write!(f, "Conn::Postgres({:?})", pg.borrow().target),
        }
    }
}

pub(crate) struct Pg {
    client: Option<postgres::Client>,
    target: Arc<PostgresTarget>,
    statements: HashMap<String, postgres::Statement>,
    last_attempt: Option<Instant>,
    /// Between `BEGIN` and `COMMIT`/`ROLLBACK`: a connection lost then is not reopened until the
    /// transaction ends, so no statement of it ever runs outside it on a new connection.
    in_tx: bool,
}

impl Drop for Pg {
    /// The sync client closes its connection (and drops its runtime) by blocking: never on a
    /// thread that drives async tasks.
    fn drop(&mut self) {
        self.statements.clear();
        if let Some(client) = self.client.take()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            std::thread::spawn(move || drop(client));
        }
    }
}

impl Pg {
    pub(crate) fn new(target: Arc<PostgresTarget>, client: postgres::Client) -> Pg {
        Pg {
            client: Some(client),
            target,
            statements: HashMap::new(),
            last_attempt: None,
            in_tx: false,
        }
    }

    /// The client, reconnected if it was lost (at most one attempt a second).
    fn client(&mut self) -> Result<&mut postgres::Client, DbError> {
        if self.client.as_ref().is_some_and(postgres::Client::is_closed) {
            tracing::warn!(database = %self.target.shown, "the database connection was lost");
            self.client = None;
        }
        if self.client.is_none() {
            if self.in_tx {
                return Err(DbError::Unavailable(
                    "the connection was lost inside a transaction".into(),
                ));
            }
            if self.last_attempt.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                return Err(DbError::Unavailable("not connected".into()));
            }
            self.last_attempt = Some(Instant::now());
            self.statements.clear();
            match connect_postgres(&self.target) {
                Ok(client) => {
                    tracing::info!(database = %self.target.shown, "database connection reopened");
                    self.client = Some(client);
                }
                Err(e) => return Err(DbError::Unavailable(e.to_string())),
            }
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, DbError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let translated = postgres_sql(sql);
        let client = self.client()?;
        let statement = off_runtime(|| client.prepare(&translated)).map_err(pg_error)?;
        self.statements.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<usize, DbError> {
        let statement = self.statement(sql)?;
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> =
            args.iter().map(|a| a as &(dyn postgres::types::ToSql + Sync)).collect();
        let client = self.client()?;
        let n = off_runtime(|| client.execute(&statement, &params)).map_err(pg_error)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, DbError> {
        let statement = self.statement(sql)?;
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> =
            args.iter().map(|a| a as &(dyn postgres::types::ToSql + Sync)).collect();
        let client = self.client()?;
        let rows = off_runtime(|| client.query(&statement, &params)).map_err(pg_error)?;
        rows.iter().map(pg_row).collect()
    }

    fn batch(&mut self, sql: &str) -> Result<(), DbError> {
        if sql == "COMMIT" || sql == "ROLLBACK" {
            // Whatever comes of it, the transaction is over; one whose connection was lost
            // rolled back on the server, and its COMMIT must not be sent on a new connection
            // (it would "succeed" there, with nothing to commit).
            self.in_tx = false;
            if self.client.as_ref().is_none_or(postgres::Client::is_closed) {
                self.client = None;
                return match sql {
                    "COMMIT" => Err(DbError::Unavailable(
                        "the connection was lost inside a transaction; nothing was written".into(),
                    )),
                    _ => Ok(()),
                };
            }
        }
        let client = self.client()?;
        off_runtime(|| client.batch_execute(sql)).map_err(pg_error)?;
        if sql == "BEGIN" {
            self.in_tx = true;
        }
        Ok(())
    }
}

/// An error's text followed by its causes' (the client's errors say little on their own).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        cause = c.source();
    }
    message
}

/// What a PostgreSQL error says: the server's message and SQLSTATE, never its detail (which can
/// quote the values of a row), or the client's own error.
pub(crate) fn pg_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// A PostgreSQL error, as unavailability when the connection is gone.
pub(crate) fn pg_error(e: postgres::Error) -> DbError {
    // No answer from a server (I/O, closed), a connection exception (class 08), or the server
    // going down (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now).
    let down = e.code().is_some_and(|c| c.code().starts_with("08") || c.code().starts_with("57P"));
    if e.is_closed() || down || e.as_db_error().is_none() && e.code().is_none() {
        // With its causes: "error performing TLS handshake: invalid peer certificate: ...".
        DbError::Unavailable(with_causes(&e))
    } else {
        DbError::Postgres(e)
    }
}

fn pg_row(row: &postgres::Row) -> Result<Row, DbError> {
    use postgres::types::Type;
    let mut values = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let value = if *ty == Type::VOID {
            Ok(Value::Null)
        } else if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(i).map(|v| v.map_or(Value::Null, Value::Int))
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(i)
                .map(|v| v.map_or(Value::Null, |v| Value::Int(v.into())))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(i)
                .map(|v| v.map_or(Value::Null, |v| Value::Int(v.into())))
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(i).map(|v| v.map_or(Value::Null, Value::from))
        } else {
            row.try_get::<_, Option<String>>(i).map(|v| v.map_or(Value::Null, Value::Text))
        };
        values.push(value.map_err(DbError::Postgres)?);
    }
    Ok(Row(values))
}

impl postgres::types::ToSql for Value {
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use postgres::types::Type;
        match self {
            Value::Null => Ok(postgres::types::IsNull::Yes),
            Value::Int(i) if *ty == Type::INT8 => i.to_sql(ty, out),
            Value::Int(i) if *ty == Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
            Value::Int(i) if *ty == Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
            Value::Int(i) if *ty == Type::BOOL => (*i != 0).to_sql(ty, out),
            Value::Int(i) => i.to_string().as_str().to_sql(ty, out),
            Value::Text(s) => s.as_str().to_sql(ty, out),
        }
    }

    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// A statement of SQLite's dialect as PostgreSQL takes it: `?N` → `$N`, `strftime` → `to_char`.
pub(crate) fn postgres_sql(sql: &str) -> String {
    let sql = sql.replace(SQLITE_NOW, POSTGRES_NOW);
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    for c in sql.chars() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c == '?' && !quoted {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

fn sqlite_value(v: &Value) -> rusqlite::types::Value {
    match v {
        Value::Null => rusqlite::types::Value::Null,
        Value::Int(i) => rusqlite::types::Value::Integer(*i),
        Value::Text(s) => rusqlite::types::Value::Text(s.clone()),
    }
}

fn sqlite_row(row: &rusqlite::Row<'_>, columns: usize) -> rusqlite::Result<Row> {
    use rusqlite::types::ValueRef;
    let mut values = Vec::with_capacity(columns);
    for i in 0..columns {
        values.push(match row.get_ref(i)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(n) => Value::Int(n),
            ValueRef::Real(f) => Value::Text(f.to_string()),
            ValueRef::Text(t) | ValueRef::Blob(t) => {
                Value::Text(String::from_utf8_lossy(t).into_owned())
            }
        });
    }
    Ok(Row(values))
}

impl Conn {
    pub(crate) fn is_postgres(&self) -> bool {
        matches!(self, Conn::Postgres(_))
    }

    /// Runs a statement; how many rows it changed.
    pub(crate) fn execute(&self, sql: &str, args: &[Value]) -> Result<usize, DbError> {
        match self {
            Conn::Sqlite(c) => {
                let mut statement = c.prepare_cached(sql)?;
                Ok(statement.execute(rusqlite::params_from_iter(args.iter().map(sqlite_value)))?)
            }
            Conn::Postgres(pg) => pg.borrow_mut().execute(sql, args),
        }
    }

    /// The rows of a query.
    pub(crate) fn query(&self, sql: &str, args: &[Value]) -> Result<Vec<Row>, DbError> {
        match self {
            Conn::Sqlite(c) => {
                let mut statement = c.prepare_cached(sql)?;
                let columns = statement.column_count();
                let mut rows =
                    statement.query(rusqlite::params_from_iter(args.iter().map(sqlite_value)))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(sqlite_row(row, columns)?);
                }
                Ok(out)
            }
            Conn::Postgres(pg) => pg.borrow_mut().query(sql, args),
        }
    }

    /// The first row of a query, if any.
    pub(crate) fn query_opt(&self, sql: &str, args: &[Value]) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    /// The first row of a query that always returns one.
    pub(crate) fn query_one(&self, sql: &str, args: &[Value]) -> Result<Row, DbError> {
        self.query_opt(sql, args)?.ok_or_else(|| DbError::Corrupt {
            table: "(query)",
            key: String::new(),
            message: "no row returned".into(),
        })
    }

    /// Runs statements without arguments, as one text.
    pub(crate) fn batch(&self, sql: &str) -> Result<(), DbError> {
        match self {
            Conn::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Conn::Postgres(pg) => pg.borrow_mut().batch(sql),
        }
    }

    /// Starts a read-only transaction whose reads all see one snapshot: SQLite's deferred
    /// transaction (in WAL mode, its first read fixes the snapshot), PostgreSQL's `REPEATABLE
    /// READ` (its default, `READ COMMITTED`, takes a new snapshot per statement).
    pub(crate) fn begin_read(&self) -> Result<Tx<'_>, DbError> {
        self.batch(if self.is_postgres() {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        } else {
            "BEGIN"
        })?;
        Ok(Tx { conn: self, changes: RefCell::default(), done: false })
    }

    /// Starts a transaction.
    pub(crate) fn begin(&self) -> Result<Tx<'_>, DbError> {
        self.batch("BEGIN")?;
        Ok(Tx { conn: self, changes: RefCell::default(), done: false })
    }

    /// The highest change `seq` committed.
    pub(crate) fn change_seq(&self) -> Result<i64, DbError> {
        self.query_one("SELECT seq FROM change_counter WHERE id = 1", &[])?.get(0)
    }
}

/// One change, as `change_log` keeps it: the table, the row's key (a UUID) and the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub seq: i64,
    pub entity: String,
    pub key: String,
    pub op: String,
}

/// An open transaction; rolled back when dropped before [`Tx::commit`].
pub(crate) struct Tx<'c> {
    conn: &'c Conn,
    changes: RefCell<Changes>,
    done: bool,
}

/// The changes a transaction recorded, in order, each once (a set beside the list, so that
/// recording stays constant-time however many rows one transaction touches).
#[derive(Default)]
struct Changes {
    list: Vec<(&'static str, String, &'static str)>,
    seen: HashSet<(&'static str, String, &'static str)>,
}

impl std::ops::Deref for Tx<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl Tx<'_> {
    /// Records that row `key` of `entity` was created, updated or deleted (`op`).
    pub(crate) fn changed(&self, entity: &'static str, key: &str, op: &'static str) {
        let mut changes = self.changes.borrow_mut();
        let change = (entity, key.to_owned(), op);
        if changes.seen.insert(change.clone()) {
            changes.list.push(change);
        }
    }

    /// Writes the change log and commits.
    pub(crate) fn commit(mut self) -> Result<(), DbError> {
        let changes = std::mem::take(&mut *self.changes.borrow_mut()).list;
        if !changes.is_empty() {
            let n = i64::try_from(changes.len()).unwrap_or(i64::MAX);
            // The counter's row lock is held to the commit: a later writer waits here, so seq
            // is handed out in commit order.
            let last: i64 = self
                .conn
                .query_one(
                    "UPDATE change_counter SET seq = seq + ?1 WHERE id = 1 RETURNING seq",
                    args![n],
                )?
                .get(0)?;
            let now = i64::try_from(bootvol_core::timefmt::now_unix()).unwrap_or(i64::MAX);
            for (i, (entity, key, op)) in changes.iter().enumerate() {
                let seq = last - n + 1 + i64::try_from(i).unwrap_or(0);
                self.conn.execute(
                    "INSERT INTO change_log (seq, entity, key, op, at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    args![seq, *entity, key, *op, now],
                )?;
            }
            if last / 256 != (last - n) / 256 {
                self.conn.execute(
                    "DELETE FROM change_log WHERE at < ?1",
                    args![now - CHANGE_LOG_RETENTION_SECS],
                )?;
            }
            if self.conn.is_postgres() {
                self.conn
                    .query("SELECT pg_notify('bootvol_changes', ?1)", args![last.to_string()])?;
            }
        }
        self.done = true;
        self.conn.batch("COMMIT")
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.conn.batch("ROLLBACK");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_taken_without_a_password_and_tls_needs_a_ca_file() {
        let plain = PostgresTarget::new("postgres://bootvol@db:5432/bootvol", None, None).unwrap();
        assert!(plain.tls.is_none());
        assert_eq!(plain.config.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
        let refused = PostgresTarget::new("postgres://bootvol:pw@db/bootvol", None, None);
        assert!(refused.unwrap_err().contains("password_file"));
        let refused =
            PostgresTarget::new("postgres://bootvol@db/bootvol?sslmode=require", None, None);
        assert!(refused.unwrap_err().contains("ca_file"));
        let unknown =
            PostgresTarget::new("postgres://bootvol@db/bootvol?sslmode=verify-full", None, None);
        assert!(
            unknown.unwrap_err().contains("sslmode"),
            "tokio-postgres parses disable/prefer/require only"
        );
        let dir = std::env::temp_dir().join(format!("bootvol-pw-{}", std::process::id()));
        std::fs::write(&dir, "s3cret\n").unwrap();
        // A password over TCP without TLS could be asked for in clear text: refused.
        let refused = PostgresTarget::new("postgres://bootvol@db/bootvol", Some(&dir), None);
        assert!(refused.unwrap_err().contains("ca_file"));
        // Over a local socket it is taken.
        let with =
            PostgresTarget::new("postgres://bootvol@%2Frun%2Fpostgresql/bootvol", Some(&dir), None)
                .unwrap();
        assert_eq!(with.config.get_password(), Some(&b"s3cret"[..]));
        assert!(!format!("{with:?}").contains("s3cret"));
        assert!(Target::Postgres(Arc::new(with)).describe().contains("no TLS: a local socket"));
        // A socket named beside a TCP address is not local.
        let mixed = PostgresTarget::new(
            "postgres://bootvol@%2Frun%2Fpostgresql/bootvol?hostaddr=192.0.2.5",
            Some(&dir),
            None,
        );
        assert!(mixed.unwrap_err().contains("ca_file"));
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn a_ca_file_makes_tls_required_and_sslmode_disable_contradicts_it() {
        let ca = std::env::temp_dir().join(format!("bootvol-ca-{}.pem", std::process::id()));
        std::fs::write(&ca, include_str!("../../../tests/fixtures/tls/test-ca.pem")).unwrap();
        for url in ["postgres://b@db/b", "postgres://b@db/b?sslmode=prefer"] {
            let target = PostgresTarget::new(url, None, Some(&ca)).unwrap();
            assert_eq!(target.config.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
            assert!(target.tls.is_some());
            let said = Target::Postgres(Arc::new(target)).describe();
            assert!(said.contains("TLS required"), "{said}");
        }
        let refused = PostgresTarget::new("postgres://b@db/b?sslmode=disable", None, Some(&ca));
        assert!(refused.unwrap_err().contains("sslmode=disable"));
        std::fs::remove_file(&ca).unwrap();
    }

    #[test]
    fn every_change_is_logged_with_seq_in_commit_order_and_pruned_logs_say_so() {
        let db = crate::Db::open_in_memory().unwrap();
        assert_eq!(db.change_seq().unwrap(), 0);
        let tx = db.conn.begin().unwrap();
        tx.changed("nodes", "a", "create");
        tx.changed("nodes", "a", "create");
        tx.changed("ports", "p", "create");
        tx.commit().unwrap();
        let tx = db.conn.begin().unwrap();
        tx.changed("nodes", "b", "update");
        drop(tx); // rolled back: nothing logged, no seq taken
        let tx = db.conn.begin().unwrap();
        tx.changed("nodes", "a", "delete");
        tx.commit().unwrap();
        let seen: Vec<(i64, String, String)> = db
            .changes_since(0, 10)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|c| (c.seq, c.key, c.op))
            .collect();
        assert_eq!(
            seen,
            [
                (1, "a".into(), "create".into()),
                (2, "p".into(), "create".into()),
                (3, "a".into(), "delete".into())
            ]
        );
        assert_eq!(db.changes_since(2, 10).unwrap().unwrap().len(), 1);
        db.conn.execute("DELETE FROM change_log WHERE seq < 3", &[]).unwrap();
        assert_eq!(db.changes_since(0, 10).unwrap(), None, "behind the pruned log: reload all");
        assert_eq!(db.changes_since(2, 10).unwrap().unwrap().len(), 1);
    }

    #[test]
    fn placeholders_and_timestamps_are_translated_outside_quotes() {
        assert_eq!(
            postgres_sql(
                "UPDATE t SET a = ?1, b = '?', c = strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now') WHERE d = ?12"
            ),
            format!("UPDATE t SET a = $1, b = '?', c = {POSTGRES_NOW} WHERE d = $12")
        );
    }
}
