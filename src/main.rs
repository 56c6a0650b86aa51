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
