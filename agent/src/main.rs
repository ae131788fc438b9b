//! `apiary-agent`: see the library's notes (`lib.rs`) and `apiary-agent --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = apiary_agent::cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(apiary_agent::cli::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", apiary_plumbing::error::chain(&*e));
            ExitCode::FAILURE
        }
    }
}
