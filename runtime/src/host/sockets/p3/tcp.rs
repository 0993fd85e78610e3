//! `wasi:sockets/types.tcp-socket` 0.3: the pod network's TCP sockets, whose connections are
//! component-model streams.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use tokio::sync::oneshot;
use wasmtime::StoreContextMut;
use wasmtime::component::{
    Access, Accessor, Destination, FutureReader, Resource, Source, StreamConsumer, StreamProducer,
    StreamReader, StreamResult,
};

use super::bindings::wasi::sockets::types::{
    Duration, ErrorCode, HostTcpSocket, HostTcpSocketWithStore, IpAddressFamily, IpSocketAddress,
};
use super::{PodSockets, SocketError, SocketResult};
use crate::host::sockets::{Sockets, any, positive, socket_options};
use crate::memory::Reservation;
use crate::network::error::ErrorCode as Code02;
use crate::network::listener::{Conn, Listener};
use crate::network::pipe::{PipeReader, PipeWriter};
use crate::network::tcp::{TcpSocket, reserve_buffers};

/// The most bytes one read from a connection hands the guest.
const READ_CHUNK: usize = 64 * 1024;

/// A stream's answer when it has nothing now: wait, unless the guest is cancelling its read or
/// write (`finish`).
fn nothing_yet(finish: bool) -> Poll<wasmtime::Result<StreamResult>> {
    if finish {
        Poll::Ready(Ok(StreamResult::Cancelled))
    } else {
        Poll::Pending
    }
}

/// Makes `socket` connected over `conn`, keeping both ends for `receive` and `send`.
fn hold(socket: &mut TcpSocket, conn: Conn, buffers: Reservation) {
    let (reader, writer) = socket.establish(conn, buffers);
    socket.ends = (Some(reader), Some(writer));
}

impl Sockets<'_> {
    fn tcp3(&mut self, this: &Resource<TcpSocket>) -> SocketResult<&mut TcpSocket> {
        Ok(self.table.get_mut(this)?)
    }
}

/// The accepted connections of a listening socket, as a stream of sockets.
struct Accepted<T: 'static> {
    listener: Arc<Listener>,
    /// What accepted sockets are made from: the listening socket's family and options.
    listening: TcpSocket,
    sockets: for<'a> fn(&'a mut T) -> Sockets<'a>,
}

impl<T: 'static> StreamProducer<T> for Accepted<T> {
    type Item = Resource<TcpSocket>;
    type Buffer = Option<Resource<TcpSocket>>;

    fn poll_produce<'a>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut store: StoreContextMut<'a, T>,
        mut dst: Destination<'a, Self::Item, Self::Buffer>,
        finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        if self.listener.poll_pending(cx).is_pending() {
            return nothing_yet(finish);
        }
        // An empty destination asks only whether a connection is there.
        if dst.remaining(&mut store) == Some(0) {
            return Poll::Ready(Ok(StreamResult::Completed));
        }
        let Some(conn) = self.listener.try_accept() else {
            // The listening socket is gone: no more connections.
            return Poll::Ready(Ok(StreamResult::Dropped));
        };
        let view = (self.sockets)(store.data_mut());
        // A connection the budget cannot hold is refused: the peer sees it closed.
        let (Some(charge), Ok(buffers)) = (
            view.budget.reserve(TcpSocket::BUDGET),
            reserve_buffers(view.budget),
        ) else {
            drop(conn);
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        let mut socket = self.listening.accepted(charge);
        hold(&mut socket, conn, buffers);
        let socket = view.table.push(socket)?;
        dst.set_buffer(Some(socket));
        Poll::Ready(Ok(StreamResult::Completed))
    }
}

/// The future a byte stream reports its end through: once, and `Ok` when nothing went wrong
/// before it was dropped.
struct Done(Option<oneshot::Sender<Result<(), ErrorCode>>>);

impl Done {
    fn new() -> (Done, FutureResult) {
        let (tx, rx) = oneshot::channel();
        (Done(Some(tx)), rx)
    }

    fn finish(&mut self, result: Result<(), ErrorCode>) {
        if let Some(done) = self.0.take() {
            let _ = done.send(result);
        }
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.finish(Ok(()));
    }
}

type FutureResult = oneshot::Receiver<Result<(), ErrorCode>>;

/// The bytes a connection receives, as the guest's stream.
struct Received {
    reader: PipeReader,
    done: Done,
}

impl<T> StreamProducer<T> for Received {
    type Item = u8;
    type Buffer = bytes::BytesMut;

    fn poll_produce<'a>(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut store: StoreContextMut<'a, T>,
        dst: Destination<'a, Self::Item, Self::Buffer>,
        finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        if dst.remaining(&mut store) == Some(0) {
            return match self.reader.poll_readable(cx) {
                Poll::Ready(()) => Poll::Ready(Ok(StreamResult::Completed)),
                Poll::Pending => nothing_yet(finish),
            };
        }
        let mut dst = dst.as_direct(store, READ_CHUNK);
        let buf = dst.remaining();
        match self.reader.poll_read_into(cx, buf) {
            Poll::Ready(0) => {
                self.done.finish(Ok(()));
                Poll::Ready(Ok(StreamResult::Dropped))
            }
            Poll::Ready(n) => {
                dst.mark_written(n);
                Poll::Ready(Ok(StreamResult::Completed))
            }
            Poll::Pending => nothing_yet(finish),
        }
    }
}

/// The guest's stream of bytes to send, written into the connection (whose send side shuts
/// down when the guest's stream ends and this is dropped).
struct Sent {
    writer: PipeWriter,
    done: Done,
}

impl<T> StreamConsumer<T> for Sent {
    type Item = u8;

    fn poll_consume(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        store: StoreContextMut<T>,
        src: Source<Self::Item>,
        finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let mut src = src.as_direct(store);
        let result = if src.remaining().is_empty() {
            self.writer.poll_writable(cx).map(|open| open.then_some(0))
        } else {
            Pin::new(&mut self.writer)
                .poll_write(cx, src.remaining())
                .map(Result::ok)
        };
        match result {
            Poll::Ready(Some(n)) => {
                src.mark_read(n);
                Poll::Ready(Ok(StreamResult::Completed))
            }
            Poll::Ready(None) => {
                self.done.finish(Err(ErrorCode::ConnectionBroken));
                Poll::Ready(Ok(StreamResult::Dropped))
            }
            Poll::Pending => nothing_yet(finish),
        }
    }
}

impl<T: Send> HostTcpSocketWithStore<T> for PodSockets {
    async fn connect(
        store: &Accessor<T, Self>,
        this: Resource<TcpSocket>,
        remote_address: IpSocketAddress,
    ) -> SocketResult<()> {
        store.with(|mut view| -> SocketResult<()> {
            let view = view.get();
            let net = view.net.clone();
            Ok(view
                .table
                .get_mut(&this)?
                .start_connect(&net, remote_address.into())?)
        })?;
        let conn = std::future::poll_fn(|cx| {
            store.with(|mut view| -> Poll<SocketResult<_>> {
                let socket = match view.get().table.get_mut(&this) {
                    Ok(socket) => socket,
                    Err(e) => return Poll::Ready(Err(e.into())),
                };
                socket
                    .poll_connect(Some(cx))
                    .map(|r| r.map_err(SocketError::from))
            })
        })
        .await?;
        store.with(|mut view| -> SocketResult<()> {
            let view = view.get();
            let buffers = reserve_buffers(view.budget)?;
            hold(view.table.get_mut(&this)?, conn, buffers);
            Ok(())
        })
    }

    fn listen(
        mut store: Access<'_, T, Self>,
        this: Resource<TcpSocket>,
    ) -> SocketResult<StreamReader<Resource<TcpSocket>>> {
        let sockets = store.getter();
        let view = store.get();
        let net = view.net.clone();
        let template = view.budget.reserve(0).ok_or(Code02::OutOfMemory)?;
        // Only an idle socket listens (bound, or bound here to an ephemeral port).
        let socket = view.table.get_mut(&this)?;
        let listener = socket.open_listener(&net, true)?;
        socket.set_listening(listener.clone());
        // The template holds no port and no memory: it only carries the family and options.
        let listening = socket.accepted(template);
        let accepted = Accepted {
            listener,
            listening,
            sockets,
        };
        StreamReader::new(&mut store, accepted).map_err(SocketError::Trap)
    }

    fn send(
        mut store: Access<'_, T, Self>,
        this: Resource<TcpSocket>,
        mut data: StreamReader<u8>,
    ) -> wasmtime::Result<FutureReader<Result<(), ErrorCode>>> {
        // The ends are there only once connected, and each is taken once.
        let Some(writer) = store.get().table.get_mut(&this)?.ends.1.take() else {
            data.close(&mut store)?;
            return FutureReader::new(&mut store, async {
                wasmtime::error::Ok(Err(ErrorCode::InvalidState))
            });
        };
        let (done, result) = Done::new();
        data.pipe(&mut store, Sent { writer, done })?;
        FutureReader::new(&mut store, async move {
            wasmtime::error::Ok(result.await.unwrap_or(Ok(())))
        })
    }

    fn receive(
        mut store: Access<'_, T, Self>,
        this: Resource<TcpSocket>,
    ) -> wasmtime::Result<(StreamReader<u8>, FutureReader<Result<(), ErrorCode>>)> {
        let Some(reader) = store.get().table.get_mut(&this)?.ends.0.take() else {
            return Ok((
                StreamReader::new(&mut store, std::iter::empty())?,
                FutureReader::new(&mut store, async {
                    wasmtime::error::Ok(Err(ErrorCode::InvalidState))
                })?,
            ));
        };
        let (done, result) = Done::new();
        let stream = StreamReader::new(&mut store, Received { reader, done })?;
        let result = FutureReader::new(&mut store, async move {
            wasmtime::error::Ok(result.await.unwrap_or(Ok(())))
        })?;
        Ok((stream, result))
    }
}

impl HostTcpSocket for Sockets<'_> {
    fn create(&mut self, family: IpAddressFamily) -> SocketResult<Resource<TcpSocket>> {
        let charge = self
            .budget
            .reserve(TcpSocket::BUDGET)
            .ok_or(Code02::OutOfMemory)?;
        Ok(self.table.push(TcpSocket::new(family.into(), charge))?)
    }

    fn bind(
        &mut self,
        this: Resource<TcpSocket>,
        local_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        Ok(self.tcp3(&this)?.bind(&net, local_address.into())?)
    }

    fn get_local_address(&mut self, this: Resource<TcpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.tcp3(&this)?.local_address()?.into())
    }

    fn get_remote_address(&mut self, this: Resource<TcpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.tcp3(&this)?.remote_address()?.into())
    }

    fn get_is_listening(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<bool> {
        Ok(self.table.get(&this)?.is_listening())
    }

    fn get_address_family(
        &mut self,
        this: Resource<TcpSocket>,
    ) -> wasmtime::Result<IpAddressFamily> {
        Ok(self.table.get(&this)?.family().into())
    }

    fn set_listen_backlog_size(
        &mut self,
        this: Resource<TcpSocket>,
        value: u64,
    ) -> SocketResult<()> {
        Ok(self.tcp3(&this)?.set_backlog(value)?)
    }

    socket_options! {
        TcpSocket, tcp3;
        get_keep_alive_enabled, set_keep_alive_enabled: options.keep_alive, bool, any;
        get_keep_alive_idle_time, set_keep_alive_idle_time: options.keep_alive_idle, Duration, positive;
        get_keep_alive_interval, set_keep_alive_interval: options.keep_alive_interval, Duration, positive;
        get_keep_alive_count, set_keep_alive_count: options.keep_alive_count, u32, positive;
        get_hop_limit, set_hop_limit: options.hop_limit, u8, positive;
        get_receive_buffer_size, set_receive_buffer_size: options.receive_buffer, u64, positive;
        get_send_buffer_size, set_send_buffer_size: options.send_buffer, u64, positive;
    }

    fn drop(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
