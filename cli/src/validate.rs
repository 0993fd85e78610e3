//! `wasmpod validate`: a pod file checked as `run` reads it, without running it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use wasmpod::PodFiles;

/// Prints `valid`, or every error of the files (exit code 2).
pub(crate) fn validate(pod: &Path, config: &[PathBuf]) -> ExitCode {
    match PodFiles::read(pod, config) {
        Ok(_) => {
            println!("valid");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
