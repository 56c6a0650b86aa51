//! The `bootvol` binary: parse arguments, run the command, map failure to an exit status.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = bootvol::cli::Cli::parse();
    let mut out = std::io::stdout().lock();
    match bootvol::cli::run(cli, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bootvol: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// mimalloc rather than glibc's allocator: it hands freed pages back to the system, so the
/// memory a snapshot rebuild borrows for a moment does not stay resident, and it is cheaper
/// per allocation on the boot path.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
