//! `apiary-ingest`: see the library for everything; this only wires telemetry, settings and the exit code.

// What the command lines print goes through `apiary_plumbing::output` (`outln!`, `errln!`): `println!`
// panics when a pipe closes (`| head -1`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = apiary_ingest::cli::Cli::parse();
    if let apiary_ingest::cli::Command::Doctor = cli.command {
        // Doctor reports a bad configuration instead of stopping at it.
        let fine = apiary_ingest::doctor::run(cli.config.as_deref()).await;
        return if fine {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        };
    }
    let settings = match apiary_ingest::cli::settings(&cli) {
        Ok(s) => s,
        Err(e) => {
            apiary_plumbing::errln!("apiary-ingest: {}", apiary_plumbing::error::chain(&*e));
            return std::process::ExitCode::FAILURE;
        }
    };
    apiary_ingest::telemetry::init(settings.log_format);
    apiary_plumbing::env::warn_unknown_vars();
    match apiary_ingest::cli::run(cli, settings).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of standard output went away (`| head -1`): done, quietly.
        Err(e) if apiary_plumbing::output::is_closed(&*e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            apiary_plumbing::errln!("apiary-ingest: {}", apiary_plumbing::error::chain(&*e));
            std::process::ExitCode::FAILURE
        }
    }
}
