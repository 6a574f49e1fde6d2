//! The `mink` binary: parses configuration and runs a node (`mink serve`); `mink transfer` asks a
//! node to move a bucket.
//!
//! Settings come from, in increasing precedence: built-in defaults, the TOML file given with
//! `--config` (or `MINK_CONFIG`), then each flag or its environment variable.
//!
//! The files: `flags` (the flags of `serve` and how they lay over the file), `serve` (a node's
//! run: logs, signals, rejoining after a lost lease), `transfer` (`mink transfer`), and this
//! file, the commands.

mod flags;
mod serve;
mod transfer;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mink_server::Settings;

use flags::ServeArgs;

/// mimalloc rather than the system allocator: a node holds and frees many page-sized buffers
/// (block cache pages, batches in flight), which the system allocator maps and unmaps afresh
/// each time, paying a page fault per 4 KiB touched.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use serve::{Stopped, serve};
use transfer::{TransferArgs, transfer};

/// Mink: table logs on object storage, over HTTP.
#[derive(Debug, Parser)]
#[command(name = "mink", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a node. With no flags: objects under ./mink-data/objects, metadata in
    /// ./mink-data/meta.redb, HTTP on 127.0.0.1:6465.
    Serve(Box<ServeArgs>),
    /// Print the complete configuration file with every default.
    DefaultConfig,
    /// Move a bucket to another live node of the cluster (any node takes the request).
    Transfer(TransferArgs),
}

/// The runtime `builder` makes, with every driver on; `None` (said on stderr) when it cannot be
/// built.
fn runtime(mut builder: tokio::runtime::Builder) -> Option<tokio::runtime::Runtime> {
    builder
        .enable_all()
        .build()
        .map_err(|e| eprintln!("mink: cannot start the runtime: {e}"))
        .ok()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::DefaultConfig => {
            #[expect(clippy::print_stdout, reason = "the configuration is the output")]
            {
                print!("{}", Settings::default().to_toml());
            }
            ExitCode::SUCCESS
        }
        Command::Transfer(args) => {
            let Some(runtime) = runtime(tokio::runtime::Builder::new_current_thread()) else {
                return ExitCode::FAILURE;
            };
            match runtime.block_on(transfer(args)) {
                Ok(answer) => {
                    #[expect(clippy::print_stdout, reason = "the node's answer is the output")]
                    {
                        println!("{answer}");
                    }
                    ExitCode::SUCCESS
                }
                Err(message) => {
                    eprintln!("mink transfer: {message}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Serve(args) => {
            let Some(runtime) = runtime(tokio::runtime::Builder::new_multi_thread()) else {
                return ExitCode::FAILURE;
            };
            match runtime.block_on(serve(*args)) {
                Ok(Stopped::Asked) => ExitCode::SUCCESS,
                Ok(Stopped::WalFailed) => ExitCode::from(mink_server::node::EXIT_WAL_FAILED),
                Err(message) => {
                    tracing::error!(%message, "mink stopped");
                    eprintln!("mink: {message}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
