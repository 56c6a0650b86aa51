//! The admin handlers' extractors: [`LoggedIn`], a logged-in session from the request's cookie
//! (else the redirect to the log-in page), and [`CheckedForm`], a form POST whose session and
//! CSRF token were checked (else the log-in page saying nothing was done, or the CSRF refusal).
//!
//! They only call the session checks of `admin` (`logged_in`, `checked_post`); what a session
//! is, and how a token is compared, is `session`'s. The anonymous log-in form checks its own
//! token (it has no logged-in session to check).

use std::collections::HashMap;

use axum::extract::{Form, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::session::Session;
use super::{AdminState, checked_post, logged_in};

/// A logged-in session; without one the handler is not run and the answer is the redirect to
/// the log-in page, which comes back to this page.
#[derive(Debug)]
pub(super) struct LoggedIn(pub(super) Session);

impl FromRequestParts<AdminState> for LoggedIn {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AdminState,
    ) -> Result<LoggedIn, Response> {
        logged_in(state, &parts.headers, &parts.uri).await.map(LoggedIn).map_err(|r| *r)
    }
}

/// A form POST (`application/x-www-form-urlencoded`) from a live session carrying its CSRF
/// token: the handler is run only then.
#[derive(Debug)]
pub(super) struct CheckedForm {
    pub(super) session: Session,
    /// The fields in the order sent (a repeated field is here each time).
    pub(super) pairs: Vec<(String, String)>,
    /// The fields by name (the last of a repeated one).
    pub(super) fields: HashMap<String, String>,
}

impl FromRequest<AdminState> for CheckedForm {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AdminState) -> Result<CheckedForm, Response> {
        let (headers, uri) = (request.headers().clone(), request.uri().clone());
        let Form(pairs) = Form::<Vec<(String, String)>>::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let fields: HashMap<String, String> = pairs.iter().cloned().collect();
        let session = checked_post(state, &headers, &uri, &fields).await.map_err(|r| *r)?;
        Ok(CheckedForm { session, pairs, fields })
    }
}
