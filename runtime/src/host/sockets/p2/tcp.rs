//! `wasi:sockets/tcp` 0.2 over the pod network's [`TcpSocket`].

use std::task::Poll;

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, subscribe};

use super::tcp_bindings as tcp;
use super::{IpAddressFamily, IpSocketAddress, Network, SocketResult};
use crate::host::sockets::{Sockets, any, positive, socket_options};
use crate::network::error::ErrorCode;
use crate::network::listener::Conn;
use crate::network::tcp::{TcpSocket, reserve_buffers};

impl Sockets<'_> {
    fn tcp(&mut self, this: &Resource<TcpSocket>) -> SocketResult<&mut TcpSocket> {
        Ok(self.table.get_mut(this)?)
    }

    /// Hands a connection to the guest: its streams become children of the socket.
    fn connected(
        &mut self,
        this: &Resource<TcpSocket>,
        conn: Conn,
    ) -> SocketResult<(Resource<DynInputStream>, Resource<DynOutputStream>)> {
        let buffers = reserve_buffers(self.budget)?;
        let (reader, writer) = self.tcp(this)?.establish(conn, buffers);
        let input: DynInputStream = Box::new(reader);
        let output: DynOutputStream = Box::new(writer);
        let input = self.table.push_child(input, this)?;
        let output = self.table.push_child(output, this)?;
        Ok((input, output))
    }
}

impl tcp::Host for Sockets<'_> {}

impl tcp::HostTcpSocket for Sockets<'_> {
    fn start_bind(
        &mut self,
        this: Resource<TcpSocket>,
        _network: Resource<Network>,
        local_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        Ok(self.tcp(&this)?.start_bind(&net, local_address.into())?)
    }

    fn finish_bind(&mut self, this: Resource<TcpSocket>) -> SocketResult<()> {
        Ok(self.tcp(&this)?.finish_bind()?)
    }

    fn start_connect(
        &mut self,
        this: Resource<TcpSocket>,
        _network: Resource<Network>,
        remote_address: IpSocketAddress,
    ) -> SocketResult<()> {
        let net = self.net.clone();
        Ok(self
            .tcp(&this)?
            .start_connect(&net, remote_address.into())?)
    }

    fn finish_connect(
        &mut self,
        this: Resource<TcpSocket>,
    ) -> SocketResult<(Resource<DynInputStream>, Resource<DynOutputStream>)> {
        match self.tcp(&this)?.poll_connect(None) {
            Poll::Ready(Ok(conn)) => self.connected(&this, conn),
            Poll::Ready(Err(code)) => Err(code.into()),
            Poll::Pending => Err(ErrorCode::WouldBlock.into()),
        }
    }

    fn start_listen(&mut self, this: Resource<TcpSocket>) -> SocketResult<()> {
        let net = self.net.clone();
        Ok(self.tcp(&this)?.start_listen(&net)?)
    }

    fn finish_listen(&mut self, this: Resource<TcpSocket>) -> SocketResult<()> {
        Ok(self.tcp(&this)?.finish_listen()?)
    }

    fn accept(
        &mut self,
        this: Resource<TcpSocket>,
    ) -> SocketResult<(
        Resource<TcpSocket>,
        Resource<DynInputStream>,
        Resource<DynOutputStream>,
    )> {
        let charge = self
            .budget
            .reserve(TcpSocket::BUDGET)
            .ok_or(ErrorCode::OutOfMemory)?;
        let (accepted, conn) = self.tcp(&this)?.accept(charge)?;
        let accepted = self.table.push(accepted)?;
        let (input, output) = self.connected(&accepted, conn)?;
        Ok((accepted, input, output))
    }

    fn local_address(&mut self, this: Resource<TcpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.tcp(&this)?.local_address()?.into())
    }

    fn remote_address(&mut self, this: Resource<TcpSocket>) -> SocketResult<IpSocketAddress> {
        Ok(self.tcp(&this)?.remote_address()?.into())
    }

    fn is_listening(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<bool> {
        Ok(self.table.get(&this)?.is_listening())
    }

    fn address_family(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<IpAddressFamily> {
        Ok(self.table.get(&this)?.family().into())
    }

    fn set_listen_backlog_size(
        &mut self,
        this: Resource<TcpSocket>,
        value: u64,
    ) -> SocketResult<()> {
        Ok(self.tcp(&this)?.set_backlog(value)?)
    }

    socket_options! {
        TcpSocket, tcp;
        keep_alive_enabled, set_keep_alive_enabled: options.keep_alive, bool, any;
        keep_alive_idle_time, set_keep_alive_idle_time: options.keep_alive_idle, u64, positive;
        keep_alive_interval, set_keep_alive_interval: options.keep_alive_interval, u64, positive;
        keep_alive_count, set_keep_alive_count: options.keep_alive_count, u32, positive;
        hop_limit, set_hop_limit: options.hop_limit, u8, positive;
        receive_buffer_size, set_receive_buffer_size: options.receive_buffer, u64, positive;
        send_buffer_size, set_send_buffer_size: options.send_buffer, u64, positive;
    }

    fn subscribe(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<Resource<DynPollable>> {
        subscribe(self.table, this)
    }

    fn shutdown(&mut self, this: Resource<TcpSocket>, how: tcp::ShutdownType) -> SocketResult<()> {
        let read = matches!(how, tcp::ShutdownType::Receive | tcp::ShutdownType::Both);
        let write = matches!(how, tcp::ShutdownType::Send | tcp::ShutdownType::Both);
        Ok(self.tcp(&this)?.shutdown(read, write)?)
    }

    fn drop(&mut self, this: Resource<TcpSocket>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
