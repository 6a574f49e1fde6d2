//! The `mink` binary: parses configuration and runs a node (`mink serve`), and is the client of
//! a node from a terminal: tables, append, read, tail, offsets, trim, writer ids, transfers.
//!
//! Settings come from, in increasing precedence: built-in defaults, the TOML file given with
//! `--config` (or `MINK_CONFIG`), then each flag or its environment variable.
//!
//! The client commands print words at a terminal and JSON when piped, and exit with status 1
//! and the node's error (status, kind, message) when a request fails.
//!
//! The files: `allocator` (the global allocator and its tuning), `flags` (the flags of `serve`
//! and how they lay over the file), `serve` (a node's run: logs, signals, rejoining after a
//! lost lease); the client: `client` (the node's URL and token, requests, errors), `output`
//! (human or machine output, progress bars), `tables`, `admin` (metadata snapshots: backup,
//! restore, on the stores directly), `append`, `read` (read and tail), `buckets` (offsets,
//! trim, writer ids), `transfer`; and this file, the commands.

mod admin;
mod allocator;
mod append;
mod buckets;
mod client;
mod flags;
mod output;
mod read;
mod serve;
mod tables;
mod transfer;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mink_server::Settings;

use flags::ServeArgs;

use serve::{Stopped, serve};

use append::AppendArgs;
use buckets::{OffsetsArgs, TrimArgs, WriterCommand};
use client::{CliResult, Client, Connection};
use output::Output;
use read::{ReadArgs, TailArgs};
use tables::TablesCommand;
use transfer::TransferArgs;

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
    /// Tables: ls, create, describe, drop.
    Tables(Client_<TablesSub>),
    /// Append rows to a bucket: NDJSON or Arrow IPC, from stdin or a file.
    Append(Client_<AppendArgs>),
    /// Read a bucket's rows from an offset to the high watermark (or --until), then exit.
    Read(Client_<ReadArgs>),
    /// Follow a bucket: print each row the moment it is durable, until interrupted.
    Tail(Client_<TailArgs>),
    /// A bucket's log start, high watermark and retained bytes (or the offset of a time).
    Offsets(Client_<OffsetsArgs>),
    /// Move a bucket's log start forward, deleting what is below.
    Trim(Client_<TrimArgs>),
    /// Idempotent writer ids.
    Writer(Client_<WriterSub>),
    /// Move a bucket to another live node of the cluster (any node takes the request).
    Transfer(Client_<TransferArgs>),
    /// Work on the node's stores directly: metadata snapshots (backup, restore).
    #[command(subcommand)]
    Admin(Box<admin::AdminCommand>),
}

/// A client command's arguments with the node to send it to.
#[derive(Debug, clap::Args)]
pub(crate) struct Client_<A: clap::Args> {
    #[command(flatten)]
    connection: Connection,
    #[command(flatten)]
    args: A,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TablesSub {
    #[command(subcommand)]
    command: TablesCommand,
}

#[derive(Debug, clap::Args)]
pub(crate) struct WriterSub {
    #[command(subcommand)]
    command: WriterCommand,
}

/// Runs a client command on a small runtime; its error on stderr and status 1.
fn client_command<A: clap::Args, F>(
    command: Client_<A>,
    run: impl FnOnce(Client, Output, A) -> F,
) -> ExitCode
where
    F: std::future::Future<Output = CliResult<()>>,
{
    let Some(runtime) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let outcome = Client::new(&command.connection)
        .map(|client| runtime.block_on(run(client, Output::detect(), command.args)));
    match outcome.and_then(|r| r) {
        Ok(()) => ExitCode::SUCCESS,
        // `mink read ... | head`: the reader has all it wants.
        Err(message) if message == output::BROKEN_PIPE => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mink: {message}");
            ExitCode::FAILURE
        }
    }
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
    allocator::no_transparent_huge_pages();
    allocator::keep_freed_memory();
    let cli = Cli::parse();
    match cli.command {
        Command::DefaultConfig => {
            #[expect(clippy::print_stdout, reason = "the configuration is the output")]
            {
                print!("{}", Settings::default().to_toml());
            }
            ExitCode::SUCCESS
        }
        Command::Tables(c) => client_command(c, |client, out, a| async move {
            tables::run(&client, out, a.command).await
        }),
        Command::Append(c) => client_command(c, |client, out, a| async move {
            append::run(&client, out, a).await
        }),
        Command::Read(c) => client_command(c, |client, out, a| async move {
            read::read(&client, out, a).await
        }),
        Command::Tail(c) => {
            client_command(
                c,
                |client, _, a| async move { read::tail(&client, a).await },
            )
        }
        Command::Offsets(c) => client_command(c, |client, out, a| async move {
            buckets::offsets(&client, out, a).await
        }),
        Command::Trim(c) => client_command(c, |client, out, a| async move {
            buckets::trim(&client, out, a).await
        }),
        Command::Writer(c) => client_command(c, |client, out, a| async move {
            buckets::writer(&client, out, a.command).await
        }),
        Command::Transfer(c) => client_command(c, |client, out, a| async move {
            transfer::transfer(&client, out, a).await
        }),
        Command::Admin(command) => {
            let Some(runtime) = runtime(tokio::runtime::Builder::new_multi_thread()) else {
                return ExitCode::FAILURE;
            };
            match runtime.block_on(admin::run(Output::detect(), *command)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => {
                    eprintln!("mink admin: {message}");
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
