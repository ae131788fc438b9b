//! `apiary-ingest`: see the library for everything; this only wires telemetry, settings and the exit code.

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
            eprintln!("apiary-ingest: {}", apiary_plumbing::error::chain(&*e));
            return std::process::ExitCode::FAILURE;
        }
    };
    apiary_ingest::telemetry::init(settings.log_format);
    apiary_plumbing::env::warn_unknown_vars();
    match apiary_ingest::cli::run(cli, settings).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("apiary-ingest: {}", apiary_plumbing::error::chain(&*e));
            std::process::ExitCode::FAILURE
        }
    }
}
