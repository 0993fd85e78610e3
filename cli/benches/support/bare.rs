//! The least a wasmtime embedding does to run the hello module: a pre-linked `InstancePre`, a
//! WASI context with argv and captured stdout, instantiate, `_start`. The startup bench and the
//! criterion suite hold wasmpod's pods against it.

use std::sync::Arc;

use wasmpod_tests::guests::AGNHOST_P1;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;

/// A store's data: the guest's WASI context alone.
pub(crate) struct Bare {
    wasi: wasmtime_wasi::p1::WasiP1Ctx,
}

/// The engine (epoch interruption on, as a node's) and the module linked with WASI.
pub(crate) struct Embedding {
    engine: wasmtime::Engine,
    pre: Arc<wasmtime::InstancePre<Bare>>,
}

impl Embedding {
    pub(crate) fn new() -> Embedding {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = wasmtime::Engine::new(&config).unwrap();
        let module = wasmtime::Module::from_file(&engine, AGNHOST_P1).unwrap();
        let mut linker = wasmtime::Linker::<Bare>::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s| &mut s.wasi).unwrap();
        let pre = Arc::new(linker.instantiate_pre(&module).unwrap());
        Embedding { engine, pre }
    }

    /// One run of `hello print hello`: what it printed, and its store, for the caller to drop
    /// where it wants (inside its timing or after).
    pub(crate) fn run(
        &self,
    ) -> impl Future<Output = (MemoryOutputPipe, wasmtime::Store<Bare>)> + Send + 'static {
        let (engine, pre) = (self.engine.clone(), self.pre.clone());
        async move {
            let stdout = MemoryOutputPipe::new(4096);
            let wasi = wasmtime_wasi::WasiCtxBuilder::new()
                .args(&["hello", "print", "hello"])
                .stdout(stdout.clone())
                .build_p1();
            let mut store = wasmtime::Store::new(&engine, Bare { wasi });
            store.set_epoch_deadline(u64::MAX / 2);
            let instance = pre.instantiate_async(&mut store).await.unwrap();
            let start = instance
                .get_typed_func::<(), ()>(&mut store, "_start")
                .unwrap();
            start.call_async(&mut store, ()).await.unwrap();
            (stdout, store)
        }
    }
}
