//! The `bootvol` binary: parse arguments, run the command, map failure to an exit status.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // No transparent huge pages: mimalloc asks for them on its arenas, and a 2 MiB page made
    // resident by one small allocation tripled what a 10,000-node snapshot costs in RSS.
    let _ = nix::sys::prctl::set_thp_disable(true);
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
