//! `apiary-agent`: see the library's notes (`lib.rs`) and `apiary-agent --help`.

// What the command lines print goes through `apiary_plumbing::output` (`outln!`, `errln!`): `println!`
// panics when a pipe closes (`| head -1`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

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
            apiary_plumbing::errln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(apiary_agent::cli::run(cli)) {
        Ok(code) => code,
        // The reader of standard output went away (`| head -1`): done, quietly.
        Err(e) if apiary_plumbing::output::is_closed(&*e) => ExitCode::SUCCESS,
        Err(e) => {
            apiary_plumbing::errln!("error: {}", apiary_plumbing::error::chain(&*e));
            ExitCode::FAILURE
        }
    }
}
