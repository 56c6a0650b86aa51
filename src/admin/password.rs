//! The admin page's password form (`/admin/password`): the logged-in user sets their own
//! password in the htpasswd file, which the running process reloads (`ApiState::set_password`).
//!
//! It needs the session, its CSRF token and the current password (checked with bcrypt, counted
//! by the log-in limiter); the new one must be at least [`MIN_LENGTH`] characters and typed
//! twice alike. Neither password is ever logged, echoed in the page or kept in the session.
//! The change ends every session of the user (they were bound to the old entry); the one that
//! made it goes on under a fresh session, its cookie set in the answer.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;

use super::extract::{CheckedForm, LoggedIn};
use super::{AdminState, client_key};

/// The shortest password the form accepts.
pub(super) const MIN_LENGTH: usize = 12;

/// Why a new password is refused, checked before any bcrypt.
fn refusal(new: &str, again: &str) -> Option<String> {
    if new.chars().count() < MIN_LENGTH {
        return Some(format!("The new password is shorter than {MIN_LENGTH} characters."));
    }
    if new != again {
        return Some("The two new passwords differ.".into());
    }
    if new.contains(['\n', '\r', ':']) || new.len() > 72 {
        // bcrypt reads 72 bytes at most; a colon or a line end would break the htpasswd file.
        return Some("The new password may not hold ':' or a line end, nor pass 72 bytes.".into());
    }
    None
}

fn page(
    state: &AdminState,
    s: &super::session::Session,
    status: StatusCode,
    error: Option<&str>,
) -> Response {
    if state.auth_off {
        return Redirect::to("/admin/").into_response();
    }
    state.render(
        status,
        "password.html.j2",
        context! { user => s.user.clone(), csrf => s.csrf.clone(), error => error,
        min_length => MIN_LENGTH },
    )
}

pub(super) async fn password_page(
    State(state): State<AdminState>,
    LoggedIn(s): LoggedIn,
) -> Response {
    page(&state, &s, StatusCode::OK, None)
}

pub(super) async fn set_password(
    State(state): State<AdminState>,
    connect: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    checked: CheckedForm,
) -> Response {
    let CheckedForm { session: s, fields: form, .. } = checked;
    if state.auth_off {
        return Redirect::to("/admin/").into_response();
    }
    let Some(user) = s.user.clone() else { return Redirect::to("/admin/login").into_response() };
    let field = |name: &str| form.get(name).cloned().unwrap_or_default();
    let (current, new, again) = (field("current"), field("new"), field("again"));
    if let Some(why) = refusal(&new, &again) {
        return page(&state, &s, StatusCode::BAD_REQUEST, Some(&why));
    }
    let client = client_key(&connect);
    if state.limiter.locked(&client, &user).is_some() {
        tracing::warn!(client, user = ?user, "admin password change refused: this user is locked for this address");
        return page(
            &state,
            &s,
            StatusCode::TOO_MANY_REQUESTS,
            Some("Too many failed attempts for this user from this address; try again later."),
        );
    }
    let api = state.api.clone();
    let who = user.clone();
    let gate = state.api.clone();
    let done = gate
        .bcrypt(move || {
            if !api.verify_password(&who, &current) {
                return Err(None);
            }
            api.set_password(&who, &new).map_err(Some)
        })
        .await
        .unwrap_or(Err(Some("too many password checks at once; try again shortly".into())));
    match done {
        Ok(()) => {
            state.limiter.succeeded(&client, &user);
            tracing::info!(client, user = ?user, "admin password changed");
            // Every session of the user ended with the old entry, this one too: it goes on
            // under a new session bound to the new entry.
            let sessions = state.sessions().await;
            sessions.close(&s.cookie);
            let (cookie, _) = sessions.open(Some(user));
            sessions.set_flash(&cookie, "Password changed.".into());
            let mut response = Redirect::to("/admin/").into_response();
            response.headers_mut().append(
                axum::http::header::SET_COOKIE,
                super::cookie_header(&cookie, super::behind_tls(&state, &headers), None),
            );
            response
        }
        Err(None) => {
            state.limiter.failed(&client, &user);
            tracing::warn!(client, user = ?user, "admin password change: wrong current password");
            page(&state, &s, StatusCode::UNAUTHORIZED, Some("The current password is wrong."))
        }
        Err(Some(e)) => {
            tracing::error!(user = ?user, error = %e, "admin password not changed");
            page(
                &state,
                &s,
                StatusCode::INTERNAL_SERVER_ERROR,
                Some(&format!("The password was not changed: {e}")),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_passwords_are_long_typed_twice_and_fit_the_file() {
        assert!(refusal("short", "short").unwrap().contains("12"));
        assert!(refusal("long enough pass", "long enough pasS").unwrap().contains("differ"));
        assert!(refusal("with:colon-inside", "with:colon-inside").is_some());
        assert_eq!(refusal("long enough pass", "long enough pass"), None);
    }
}
