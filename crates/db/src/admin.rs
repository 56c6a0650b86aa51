//! What the admin page keeps across restarts: its session signing key (`admin_keys`) and the
//! sessions logged out before their end (`admin_logouts`).

use super::engine::args;
use super::{Db, DbError};

impl Db {
    /// The signing key named `name` (text, opaque here): `fresh` is stored the first time, and
    /// the stored one is returned ever after, so every instance and every restart signs alike
    /// (the first writer wins when two race).
    pub fn admin_key(&self, name: &str, fresh: &str) -> Result<String, DbError> {
        self.conn.execute(
            "INSERT INTO admin_keys (name, key) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
            args![name, fresh],
        )?;
        self.conn
            .query_opt("SELECT key FROM admin_keys WHERE name = ?1", args![name])?
            .ok_or_else(|| DbError::Corrupt {
                table: "admin_keys",
                key: name.to_owned(),
                message: "missing after insert".into(),
            })?
            .get(0)
    }

    /// Records a logged-out session until `expires_at` (Unix seconds), forgetting those
    /// expired at `now`.
    pub fn add_admin_logout(
        &self,
        session: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<(), DbError> {
        self.conn.execute("DELETE FROM admin_logouts WHERE expires_at <= ?1", args![now])?;
        self.conn.execute(
            "INSERT INTO admin_logouts (session, expires_at) VALUES (?1, ?2) \
             ON CONFLICT (session) DO NOTHING",
            args![session, expires_at],
        )?;
        Ok(())
    }

    /// The sessions logged out and not yet expired at `now`.
    pub fn admin_logouts(&self, now: i64) -> Result<Vec<String>, DbError> {
        let rows = self
            .conn
            .query("SELECT session FROM admin_logouts WHERE expires_at > ?1", args![now])?;
        rows.iter().map(|r| r.get(0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_made_once_and_logouts_expire() {
        let db = Db::open_in_memory().unwrap();
        let first = db.admin_key("session", "k1").unwrap();
        assert_eq!(first, "k1");
        assert_eq!(db.admin_key("session", "k2").unwrap(), first, "kept, not redrawn");
        db.add_admin_logout("a", 100, 50).unwrap();
        db.add_admin_logout("b", 300, 50).unwrap();
        assert_eq!(db.admin_logouts(200).unwrap(), ["b"]);
        db.add_admin_logout("c", 400, 200).unwrap();
        let rows: i64 =
            db.conn.query_one("SELECT COUNT(*) FROM admin_logouts", &[]).unwrap().get(0).unwrap();
        assert_eq!(rows, 2, "the expired one is gone");
    }
}
