//! What tells a connection's registry entry what moved: the socket wrapper (`Watched`: the first
//! bytes of a request, every byte either way), the request body (`TrackedRequestBody`: its bytes,
//! whether it was read to its end) and the response body (`IdleWhenDone`: the connection is
//! idle once hyper took all of it). Each only notes progress in the connection's `Activity`
//! (atomics, no lock, no allocation) and passes everything through unchanged.
//!
//! It knows nothing of deadlines, routes or the accept loop.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::registry::{Activity, Phase};

/// The socket, noting the first bytes of each request (that is when `header_timeout` starts
/// for a keep-alive connection) and every byte moved either way (what tells a stalled client).
pub(super) struct Watched {
    pub(super) stream: TcpStream,
    pub(super) activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.received();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.sent();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.sent();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A request body that records whether it was read to its end, and counts its bytes.
pub(super) struct TrackedRequestBody {
    pub(super) inner: Incoming,
    pub(super) read_to_end: Arc<AtomicBool>,
    pub(super) activity: Arc<Activity>,
}

impl hyper::body::Body for TrackedRequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.activity.body_bytes(data.len());
        }
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read_to_end.store(true, Ordering::Release);
            self.activity.body_done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that marks its connection idle once hyper has taken all of it (or dropped
/// it: the connection is then closing).
pub(super) struct IdleWhenDone {
    pub(super) inner: Body,
    pub(super) activity: Option<Arc<Activity>>,
}

impl IdleWhenDone {
    fn done(&mut self) {
        if let Some(activity) = self.activity.take() {
            activity.enter(Phase::Idle);
        }
    }
}

impl Drop for IdleWhenDone {
    fn drop(&mut self) {
        self.done();
    }
}

impl hyper::body::Body for IdleWhenDone {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            self.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
