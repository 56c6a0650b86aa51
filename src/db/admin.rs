//! What the admin page keeps across restarts: its session signing key (`admin_keys`) and the
//! sessions logged out before their end (`admin_logouts`).

use rusqlite::{OptionalExtension, params};

use super::{Db, DbError};

impl Db {
    /// The key named `name`, made from `fresh` the first time it is asked for (the first
    /// writer wins when two processes race).
    pub fn admin_key(&self, name: &str, fresh: &[u8]) -> Result<Vec<u8>, DbError> {
        self.conn.execute(
            "INSERT INTO admin_keys (name, key) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
            params![name, fresh],
        )?;
        let key: Option<Vec<u8>> = self
            .conn
            .query_row("SELECT key FROM admin_keys WHERE name = ?1", [name], |r| r.get(0))
            .optional()?;
        key.ok_or_else(|| DbError::Corrupt {
            table: "admin_keys",
            key: name.to_owned(),
            message: "missing after insert".into(),
        })
    }

    /// Records a session logged out, until `expires_at` (Unix seconds), and forgets those
    /// whose time has passed at `now`.
    pub fn add_admin_logout(
        &self,
        session: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<(), DbError> {
        self.conn.execute("DELETE FROM admin_logouts WHERE expires_at <= ?1", [now])?;
        self.conn.execute(
            "INSERT INTO admin_logouts (session, expires_at) VALUES (?1, ?2) \
             ON CONFLICT (session) DO NOTHING",
            params![session, expires_at],
        )?;
        Ok(())
    }

    /// The sessions logged out that would still be live at `now`.
    pub fn admin_logouts(&self, now: i64) -> Result<Vec<String>, DbError> {
        let mut statement =
            self.conn.prepare("SELECT session FROM admin_logouts WHERE expires_at > ?1")?;
        let rows = statement.query_map([now], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_made_once_and_logouts_expire() {
        let db = Db::open_in_memory().unwrap();
        let first = db.admin_key("session", &[1; 32]).unwrap();
        assert_eq!(first, vec![1; 32]);
        assert_eq!(db.admin_key("session", &[2; 32]).unwrap(), first, "kept, not redrawn");
        db.add_admin_logout("a", 100, 50).unwrap();
        db.add_admin_logout("b", 300, 50).unwrap();
        assert_eq!(db.admin_logouts(200).unwrap(), ["b"]);
        db.add_admin_logout("c", 400, 200).unwrap();
        let rows: i64 =
            db.conn.query_row("SELECT COUNT(*) FROM admin_logouts", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 2, "the expired one is gone");
    }
}
