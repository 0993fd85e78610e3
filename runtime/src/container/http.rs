//! HTTP handler containers: a component exporting `wasi:http/incoming-handler` is served on the
//! container's TCP ports inside the pod network, each request in a fresh instance made from the
//! pre-instantiated component (as `wasmtime serve` does).
//!
//! The container runs while it serves. Each instance has the container's env and volumes, draws
//! its memory from the container's one budget (a request that does not fit in what the requests
//! in flight leave traps and is answered 500) and from the container's one CPU limit; at most
//! [`Serving::concurrency`](crate::spec::Serving::concurrency) requests run at once, the rest wait. A request that traps, runs past
//! [`Serving::timeout`](crate::spec::Serving::timeout) or never answers is answered 500 (504 for the timeout), counted and
//! logged on the container's stderr; the container keeps serving. TERM closes the ports (new
//! connections are refused), lets the requests in flight finish and exits 0 when they have: the
//! grace period's KILL cuts what is left.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::io::AsyncWriteExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_util::either::Either;
use tokio_util::sync::CancellationToken;
use wasmtime::Store;
use wasmtime_wasi::cli::StdoutStream;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::p3;

use super::{Exit, Sandbox, Shared, Thread, exit_of, not_started};
use crate::engine::{Entry, HttpPre, Image};
use crate::host::P2State;
use crate::network::HostStream;

/// The most connections one handler container keeps open (`wasmtime serve`'s default is 1,000):
/// each holds a task and its buffers, so a client opening connections cannot grow them without
/// bound.
const MAX_CONNECTIONS: usize = 1024;
/// How long a client has to send each request head.
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A connection to a handler: from the pod network, or from the host's (a task's).
type Connection = Either<HostStream, tokio::net::TcpStream>;

/// One port's listener, in the pod's port table or the host's network namespace.
enum Acceptor {
    Pod(crate::network::HostListener),
    Host(tokio::net::TcpListener),
}

impl Acceptor {
    /// Listens on `port` of the sandbox's network: the pod's, or (a task, whose sockets are the
    /// host's) every IPv4 address of the process's network namespace.
    async fn bind(sandbox: &Sandbox, port: u16) -> Result<Acceptor, String> {
        if sandbox.host_sockets {
            let any = (std::net::Ipv4Addr::UNSPECIFIED, port);
            let listener = tokio::net::TcpListener::bind(any).await;
            return listener.map(Acceptor::Host).map_err(|e| e.to_string());
        }
        let listener = sandbox.net.listen_host(port);
        listener.map(Acceptor::Pod).map_err(|e| e.to_string())
    }

    /// The next connection; `None` once the listener is closed.
    async fn accept(&self) -> Option<Connection> {
        match self {
            Acceptor::Pod(l) => l.accept().await.map(|(stream, _)| Either::Left(stream)),
            Acceptor::Host(l) => loop {
                match l.accept().await {
                    Ok((stream, _)) => return Some(Either::Right(stream)),
                    // Out of descriptors, a connection reset before it was taken: try again
                    // after a moment rather than spin.
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                }
            },
        }
    }
}

impl Sandbox {
    /// Serves the handler until TERM, then drains. A handler whose first instance cannot be made
    /// (a trap in its start, a memory limit too small) ends as a command that cannot start would,
    /// so the restart policy applies.
    pub(super) async fn serve(
        self: &Arc<Self>,
        pre: &HttpPre,
        stdout: impl StdoutStream + 'static,
        stderr: impl StdoutStream + 'static,
    ) -> Exit {
        let http = &self.http;
        let (stdout, stderr) = (Shared::new(stdout), Shared::new(stderr));
        let mut wasi = match self.wasi(&self.argv, stdout.clone(), stderr.clone(), Thread::Worker) {
            Ok(wasi) => wasi,
            Err(e) => return Exit::start_error(e.to_string()),
        };
        let mut store = self.p2_store(pre.engine(), &mut wasi, self.budget.clone(), Thread::Worker);
        if let Err(e) = pre.instantiate(&mut store).await {
            return not_started(e, store.data().limiter.hit);
        }
        drop(store);

        let (accepted_tx, mut accepted) = mpsc::channel::<(Connection, OwnedSemaphorePermit)>(1);
        let mut acceptors = JoinSet::new();
        // Past this many open connections the container accepts no more until one closes; the
        // next wait in the port's backlog, then are held as a full Linux backlog holds them.
        let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        for &port in &http.ports {
            let listener = match Acceptor::bind(self, port).await {
                Ok(listener) => listener,
                Err(e) => return Exit::start_error(format!("cannot listen on port {port}: {e}")),
            };
            let (accepted_tx, open) = (accepted_tx.clone(), open.clone());
            acceptors.spawn(async move {
                while let Ok(slot) = open.clone().acquire_owned().await
                    && let Some(stream) = listener.accept().await
                {
                    if accepted_tx.send((stream, slot)).await.is_err() {
                        break;
                    }
                }
            });
        }
        drop(accepted_tx);

        let server = Arc::new(Server {
            sandbox: self.clone(),
            pre: pre.clone(),
            slots: Arc::new(Semaphore::new(http.serving.concurrency)),
            timeout: http.serving.timeout,
            stderr,
            stdout,
            stop: CancellationToken::new(),
            handled: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        // When this future is dropped (KILL), every request still running is cut.
        let _cut = server.stop.clone().drop_guard();
        let (drain_tx, drain) = watch::channel(false);
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                () = self.term.delivered() => break,
                Some((stream, slot)) = accepted.recv() => {
                    let connection = server.clone().connection(stream, drain.clone());
                    connections.spawn(async move {
                        connection.await;
                        drop(slot);
                    });
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        // Stop accepting (connections now are refused), then let each connection finish the
        // request it has and close.
        acceptors.shutdown().await;
        drop(accepted);
        let _ = drain_tx.send(true);
        while connections.join_next().await.is_some() {}
        // Every request has given back its slot once its instance is gone.
        let all = u32::try_from(http.serving.concurrency).unwrap_or(u32::MAX);
        let _ = server.slots.acquire_many(all).await;
        Exit::code(0)
    }
}

/// One handler container's server: what each connection and request needs.
struct Server<O, E> {
    sandbox: Arc<Sandbox>,
    pre: HttpPre,
    slots: Arc<Semaphore>,
    timeout: std::time::Duration,
    stdout: Shared<O>,
    stderr: Shared<E>,
    /// Cancelled when the container is killed: every request task ends.
    stop: CancellationToken,
    handled: AtomicU64,
    failed: AtomicU64,
}

/// Why a request got no (complete) response.
enum Failure {
    Trap(String),
    Timeout,
    NoResponse,
    Killed,
}

impl<O, E> Server<O, E>
where
    O: StdoutStream + 'static,
    E: StdoutStream + 'static,
{
    /// Serves one connection's requests (HTTP/1.1, keep-alive) until it closes or, once the
    /// container drains, after the request it has.
    async fn connection(self: Arc<Self>, stream: Connection, mut drain: watch::Receiver<bool>) {
        let server = self.clone();
        let service = hyper::service::service_fn(move |request| {
            let server = server.clone();
            async move { Ok::<_, Infallible>(server.handle(request).await) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            // A client that trickles its request head (slowloris) loses its connection.
            .header_read_timeout(HEADER_TIMEOUT)
            .keep_alive(true)
            // A client may shut its sending side down after the request and still read.
            .half_close(true)
            .serve_connection(TokioIo::new(stream), service);
        let mut conn = std::pin::pin!(conn);
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = drain.wait_for(|d| *d) => conn.as_mut().graceful_shutdown(),
        }
        let _ = conn.await;
    }

    /// Runs one request in a fresh instance and answers with what it set, or an error status.
    async fn handle(
        self: Arc<Self>,
        request: hyper::Request<hyper::body::Incoming>,
    ) -> hyper::Response<HyperOutgoingBody> {
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return plain(503, "the container is stopping");
        };
        let line = format!("{} {}", request.method(), request.uri().path());
        let task_line = line.clone();
        let sandbox = &self.sandbox;
        let mut wasi = match sandbox.wasi(
            &sandbox.argv,
            self.stdout.clone(),
            self.stderr.clone(),
            Thread::Worker,
        ) {
            Ok(wasi) => wasi,
            Err(e) => return plain(500, &e.to_string()),
        };
        // Every request in flight draws from the container's one budget, as every process of a
        // container counts in its cgroup: concurrent requests cannot multiply the limit.
        let budget = sandbox.budget.clone();
        // The request's instance comes from the pool when the handler has its twin there.
        let lease = sandbox.image.short_lived();
        let pre = match &*lease.image {
            Image::Component {
                entry: Entry::Http(pre),
                ..
            } => pre.clone(),
            _ => self.pre.clone(),
        };
        let mut store = sandbox.p2_store(pre.engine(), &mut wasi, budget, Thread::Worker);
        // The guest's response (headers, and a body that may still be streaming) comes through
        // `tx`; the task ends when the guest's call does (for 0.3, once the body was sent).
        let (tx, rx) = oneshot::channel::<Result<hyper::Response<HyperOutgoingBody>, String>>();
        let (sent_tx, sent) = oneshot::channel::<()>();
        let server = self.clone();
        let started = Instant::now();
        let cut = Arc::new(AtomicBool::new(false));
        let cut_by_task = cut.clone();
        let task = tokio::spawn(async move {
            let _slot = slot;
            let run = server
                .sandbox
                .meter
                .run(pre.call(&mut store, request, tx, sent));
            let result = tokio::select! {
                ran = tokio::time::timeout(server.timeout, run) => match ran {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => {
                        let exit = exit_of(Err(e), store.data().limiter.hit);
                        Err(Failure::Trap(exit.message.unwrap_or_else(|| format!("exit {}", exit.code))))
                    }
                    Err(_) => Err(Failure::Timeout),
                },
                _ = server.stop.cancelled() => Err(Failure::Killed),
            };
            server.handled.fetch_add(1, Ordering::Relaxed);
            // Before the store (and with it the body's sender) goes: a body it was still writing
            // must end as an error, not as a complete response.
            cut_by_task.store(result.is_err(), Ordering::Release);
            if let Err(failure) = &result {
                server.failed(&task_line, failure, started).await;
            }
            // The instance goes before its place in the pool.
            drop(store);
            drop(lease);
            result
        });
        match rx.await {
            Ok(Ok(response)) => response.map(|body| {
                Cuttable {
                    body,
                    cut,
                    _sent: sent_tx,
                }
                .boxed_unsync()
            }),
            Ok(Err(code)) => plain(500, &format!("the handler failed: {code}")),
            Err(_) => match task.await {
                Ok(Err(Failure::Timeout)) => plain(504, "the request timed out"),
                Ok(Err(Failure::Killed)) | Err(_) => plain(503, "the container was stopped"),
                Ok(Err(Failure::Trap(_))) => plain(500, "the handler trapped"),
                Ok(Ok(())) | Ok(Err(Failure::NoResponse)) => {
                    self.failed(&line, &Failure::NoResponse, started).await;
                    plain(500, "the handler set no response")
                }
            },
        }
    }

    /// Counts a failed request and says why on the container's stderr.
    async fn failed(&self, line: &str, failure: &Failure, started: Instant) {
        if matches!(failure, Failure::Killed) {
            return;
        }
        let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
        let handled = self.handled.load(Ordering::Relaxed);
        let why = match failure {
            Failure::Trap(why) => format!("trapped: {why}"),
            Failure::Timeout => format!("timed out after {:?}", self.timeout),
            Failure::NoResponse => "returned without setting a response".to_owned(),
            Failure::Killed => unreachable!(),
        };
        let mut message = String::new();
        let _ = writeln!(
            message,
            "wasmpod: request {line} {why} ({:.1?}; {failed} of {handled} requests failed)",
            started.elapsed()
        );
        tracing::debug!(target: "wasmpod::http", "{}", message.trim_end());
        let mut stream = std::pin::Pin::from(self.stderr.async_stream());
        let _ = stream.write_all(message.as_bytes()).await;
        let _ = stream.flush().await;
    }
}

/// A guest's response body that ends as an error (the connection is cut, the client never sees
/// a complete response) when its request failed before finishing it.
struct Cuttable {
    body: HyperOutgoingBody,
    cut: Arc<AtomicBool>,
    /// Dropped with the body: a 0.3 guest's call ends once its body was sent.
    _sent: oneshot::Sender<()>,
}

impl http_body::Body for Cuttable {
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        match std::pin::Pin::new(&mut self.body).poll_frame(cx) {
            std::task::Poll::Ready(None) if self.cut.load(Ordering::Acquire) => {
                std::task::Poll::Ready(Some(Err(wasmtime_wasi_http::Error::HttpResponseIncomplete)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream() && !self.cut.load(Ordering::Acquire)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request as a server receives it has only a path in its URI; a 0.3 handler sees the scheme
/// and authority a 0.2 one does (wasmtime-wasi-http's `new_incoming_request`): `http`, and the
/// URI's authority or else the Host header. Without either, the URI stays as it came.
fn with_scheme_and_authority<B>(mut request: hyper::Request<B>) -> hyper::Request<B> {
    let uri = request.uri();
    if uri.scheme().is_some() {
        return request;
    }
    let authority = uri.authority().cloned().or_else(|| {
        let host = request.headers().get(http::header::HOST)?;
        host.to_str().ok()?.parse().ok()
    });
    let mut parts = uri.clone().into_parts();
    parts.scheme = Some(http::uri::Scheme::HTTP);
    parts.authority = authority;
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    if let Ok(uri) = http::Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
    request
}

impl HttpPre {
    /// Instantiates the handler in `store` and calls it with `request`; its response goes to
    /// `response`. A 0.3 handler's instance keeps running (its body may be written by tasks that
    /// outlive `handle`) until `sent` says the body is gone.
    async fn call(
        &self,
        store: &mut Store<P2State>,
        request: hyper::Request<hyper::body::Incoming>,
        response: oneshot::Sender<Result<hyper::Response<HyperOutgoingBody>, String>>,
        sent: oneshot::Receiver<()>,
    ) -> wasmtime::Result<()> {
        match self {
            HttpPre::P2(pre) => {
                let mut http = store.data_mut().http();
                let request = http.new_incoming_request(Scheme::Http, request)?;
                let out = http.new_response_outparam_from_callback(move |r| {
                    let _ = response.send(r.map_err(|code| format!("{code:?}")));
                })?;
                let proxy = pre.instantiate_async(&mut *store).await?;
                proxy
                    .wasi_http_incoming_handler()
                    .call_handle(&mut *store, request, out)
                    .await
            }
            HttpPre::P3(pre) => {
                let service = pre.instantiate_async(&mut *store).await?;
                // The hooks only filter the request's headers here, as wasmpod's own do.
                let (request, io) = p3::Request::from_http(
                    wasmtime_wasi_http::default_hooks(),
                    with_scheme_and_authority(request),
                );
                store
                    .run_concurrent(async move |accessor| {
                        let request =
                            accessor.with(|mut store| store.get().http().table.push(request))?;
                        let answer = service
                            .wasi_http_handler()
                            .call_handle(accessor, request)
                            .await?;
                        let answer = match answer {
                            Ok(answer) => answer,
                            Err(code) => {
                                let _ = response.send(Err(format!("{code:?}")));
                                return Ok(());
                            }
                        };
                        let answer = accessor.with(|mut store| {
                            let answer = store.get().http().table.delete(answer)?;
                            answer.into_http_with_getter(
                                &mut store,
                                io,
                                <P2State as WasiHttpView>::http,
                            )
                        })?;
                        let _ = response.send(Ok(answer));
                        // The body is written by the guest's tasks, which run only while this
                        // event loop does.
                        let _ = sent.await;
                        Ok(())
                    })
                    .await?
            }
        }
    }

    fn engine(&self) -> &wasmtime::Engine {
        match self {
            HttpPre::P2(pre) => pre.engine(),
            HttpPre::P3(pre) => pre.engine(),
        }
    }
}

/// A response made by the host, with a short plain-text body.
fn plain(status: u16, body: &str) -> hyper::Response<HyperOutgoingBody> {
    let mut response = hyper::Response::new(
        Full::new(Bytes::from(format!("{body}\n")))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    response
}
