//! A trap's message: its cause and where in the guest it happened, as `wasmtime run` shows it,
//! bounded (a stack overflow's backtrace has thousands of frames; a Kubernetes termination
//! message is at most 4 KiB).

use std::fmt::Write;

/// The innermost frames of a trap's wasm backtrace its message keeps.
const FRAMES: usize = 10;
/// The most characters of a frame's module or function name kept (a generic's demangled name can
/// be long; a guest names its module and functions as it likes).
const NAME_CHARS: usize = 160;

/// `error`'s root cause, then the innermost [`FRAMES`] frames of its wasm backtrace (module,
/// demangled function name without its hash, both [`printable`]), one a line, and how many more
/// there were.
pub(super) fn message(error: &wasmtime::Error) -> String {
    let mut message = error.root_cause().to_string();
    let Some(trace) = error.downcast_ref::<wasmtime::WasmBacktrace>() else {
        return message;
    };
    let frames = trace.frames();
    if frames.is_empty() {
        return message;
    }
    message.push_str("\nwasm backtrace:");
    for (i, frame) in frames.iter().take(FRAMES).enumerate() {
        let module = printable(frame.module().name().unwrap_or("<module>"));
        let func = match frame.func_name() {
            Some(name) => printable(&format!("{:#}", rustc_demangle::demangle(name))),
            None => format!("<wasm function {}>", frame.func_index()),
        };
        // Writing to a `String` cannot fail.
        let _ = write!(message, "\n  {i}: {module}!{func}");
    }
    if frames.len() > FRAMES {
        let _ = write!(message, "\n  … {} more frames", frames.len() - FRAMES);
    }
    message
}

/// A name from the guest's name section, as it may be shown: at most [`NAME_CHARS`] characters,
/// control characters (a newline that would forge a line, a terminal escape) replaced.
fn printable(name: &str) -> String {
    let mut shown: String = name
        .chars()
        .take(NAME_CHARS)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if name.chars().nth(NAME_CHARS).is_some() {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trap_of(wat: &str) -> wasmtime::Error {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat::parse_str(wat).unwrap()).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let run = instance
            .get_typed_func::<(), ()>(&mut store, "run")
            .unwrap();
        run.call(&mut store, ()).unwrap_err()
    }

    #[test]
    fn the_message_names_the_frames_innermost_first() {
        let error = trap_of(
            r#"(module $guest
                 (func $inner unreachable)
                 (func $outer call $inner)
                 (func (export "run") call $outer))"#,
        );
        let message = message(&error);
        let lines: Vec<&str> = message.lines().collect();
        assert!(lines[0].contains("unreachable"), "{message}");
        assert_eq!(lines[1], "wasm backtrace:");
        assert_eq!(lines[2], "  0: guest!inner", "{message}");
        assert_eq!(lines[3], "  1: guest!outer", "{message}");
        assert_eq!(lines.len(), 5, "{message}");
    }

    #[test]
    fn a_deep_backtrace_is_cut_to_its_innermost_frames() {
        let error = trap_of(r#"(module (func $down (export "run") call $down))"#);
        let message = message(&error);
        assert!(message.contains("stack"), "{message}");
        assert_eq!(message.lines().count(), 2 + FRAMES + 1, "{message}");
        assert!(message.ends_with("more frames"), "{message}");
        assert!(message.len() < 4096, "{}", message.len());
    }

    #[test]
    fn names_the_guest_chose_cannot_forge_lines_or_grow_the_message() {
        let long = "m".repeat(100_000);
        let error = trap_of(&format!(
            r#"(module (@name "{long}")
                 (func (@name "evil\0aname\1b[2J") unreachable)
                 (func (export "run") call 0))"#
        ));
        let message = message(&error);
        assert_eq!(message.lines().count(), 4, "{message}");
        assert!(message.contains("evil\u{fffd}name\u{fffd}[2J"), "{message}");
        assert!(message.len() < 1024, "{}", message.len());
    }
}
