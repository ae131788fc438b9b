//! `apiary-ingest`: see the library for everything; this only wires telemetry, settings and the exit code.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = apiary_ingest::cli::Cli::parse();
    let settings = match apiary_ingest::cli::settings(&cli) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("apiary-ingest: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    apiary_ingest::telemetry::init(settings.log_format);
    apiary_plumbing::env::warn_unknown_vars();
    match apiary_ingest::cli::run(cli, settings).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("apiary-ingest: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
