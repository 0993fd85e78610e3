//! A stdout or stderr several writers share.

use std::sync::{Arc, Mutex};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::OutputStream;

/// One stdout or stderr shared by every instance of a handler container (or by a task and
/// the line that says why it ended).
pub(crate) struct Shared<S>(Arc<Mutex<S>>);

impl<S> Shared<S> {
    pub(crate) fn new(stream: S) -> Shared<S> {
        Shared(Arc::new(Mutex::new(stream)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, S> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<S: StdoutStream> IsTerminal for Shared<S> {
    fn is_terminal(&self) -> bool {
        self.lock().is_terminal()
    }
}

impl<S: StdoutStream + 'static> StdoutStream for Shared<S> {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        self.lock().async_stream()
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        self.lock().p2_stream()
    }
}
