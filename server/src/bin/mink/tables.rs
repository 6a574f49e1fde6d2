//! `mink tables ls|create|describe|drop`.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{BucketRef, CliResult, Client, escape, json_of};
use crate::output::{Output, bytes, table, write_line};

#[derive(Debug, Subcommand)]
pub(crate) enum TablesCommand {
    /// List the tables.
    Ls,
    /// Create a table.
    Create(CreateArgs),
    /// A table's schema versions, retention, and every bucket's offsets and retained bytes.
    Describe {
        /// The table.
        table: String,
    },
    /// Drop a table: its logs are destroyed and the name is free at once.
    Drop {
        /// The table.
        table: String,
    },
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The table's name.
    name: String,
    /// The schema: `id:int64,msg:utf8` (each column nullable unless its type ends with `!`), a
    /// JSON schema `{"fields": [...]}`, or `@FILE` holding either.
    #[arg(long)]
    schema: String,
    /// Buckets per partition.
    #[arg(long, default_value_t = 1)]
    buckets: u32,
    /// Partition names, comma-separated [default: one, `default`].
    #[arg(long, value_delimiter = ',')]
    partitions: Option<Vec<String>>,
    /// Keep batches committed at most this long ago (milliseconds; at least 60000).
    #[arg(long)]
    retention_age_ms: Option<u64>,
    /// Keep at most about this many bytes per bucket (at least 1048576).
    #[arg(long)]
    retention_bytes: Option<u64>,
}

/// The JSON schema a `--schema` argument names.
pub(crate) fn parse_schema(text: &str) -> CliResult<Value> {
    let text = match text.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the schema {path}: {e}"))?,
        None => text.to_owned(),
    };
    let text = text.trim();
    if text.starts_with('{') {
        return serde_json::from_str(text).map_err(|e| format!("the schema is not JSON: {e}"));
    }
    let mut fields = Vec::new();
    for column in columns(text)
        .into_iter()
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        let (name, kind) = column
            .split_once(':')
            .ok_or_else(|| format!("column `{column}` needs a type: NAME:TYPE, e.g. id:int64"))?;
        let (kind, nullable) = match kind.trim().strip_suffix('!') {
            Some(kind) => (kind, false),
            None => (kind.trim(), true),
        };
        fields.push(json!({"name": name.trim(), "type": kind, "nullable": nullable}));
    }
    if fields.is_empty() {
        return Err("the schema has no columns".to_owned());
    }
    Ok(json!({ "fields": fields }))
}

/// The columns of a short schema: split at commas outside parentheses (`Decimal128(10, 2)`).
fn columns(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

pub(crate) async fn run(client: &Client, out: Output, command: TablesCommand) -> CliResult<()> {
    match command {
        TablesCommand::Ls => ls(client, out).await,
        TablesCommand::Create(args) => create(client, out, args).await,
        TablesCommand::Describe { table } => describe(client, out, &table).await,
        TablesCommand::Drop { table } => {
            let url = client.v1(&format!("tables/{}", escape(&table)));
            let answer = json_of(client.send(client.request(Method::DELETE, &url)).await?).await?;
            out.say(|| format!("dropped table {table}"), &answer)
        }
    }
}

async fn ls(client: &Client, out: Output) -> CliResult<()> {
    let answer = client.get_json(&client.v1("tables")).await?;
    let tables = answer["tables"].as_array().cloned().unwrap_or_default();
    if !out.human {
        for t in &tables {
            write_line(&t.to_string())?;
        }
        return Ok(());
    }
    if tables.is_empty() {
        return write_line(
            "no tables (create one with `mink tables create NAME --schema id:int64`)",
        );
    }
    let rows: Vec<Vec<String>> = tables
        .iter()
        .map(|t| {
            vec![
                t["name"].as_str().unwrap_or("").to_owned(),
                t["buckets"].to_string(),
                t["partitions"].as_array().map_or(0, Vec::len).to_string(),
                t["latest_schema_id"].to_string(),
                retention_text(&t["retention"]["effective"]),
            ]
        })
        .collect();
    write_line(&table(
        &["NAME", "BUCKETS", "PARTITIONS", "SCHEMA", "RETENTION"],
        &rows,
    ))
}

async fn create(client: &Client, out: Output, args: CreateArgs) -> CliResult<()> {
    let mut body = json!({
        "name": args.name,
        "schema": parse_schema(&args.schema)?,
        "buckets": args.buckets,
    });
    if let Some(partitions) = args.partitions {
        body["partitions"] = json!(partitions);
    }
    if args.retention_age_ms.is_some() || args.retention_bytes.is_some() {
        let mut retention = json!({});
        if let Some(age) = args.retention_age_ms {
            retention["age_ms"] = json!(age);
        }
        if let Some(b) = args.retention_bytes {
            retention["bytes"] = json!(b);
        }
        body["retention"] = retention;
    }
    let answer = client
        .send_json(Method::POST, &client.v1("tables"), &body)
        .await?;
    out.say(
        || {
            format!(
                "created table {} ({} buckets per partition)",
                answer["name"].as_str().unwrap_or(""),
                answer["buckets"]
            )
        },
        &answer,
    )
}

/// `age 1h, 1.0 GiB per bucket`, or `keep everything`.
fn retention_text(effective: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(age) = effective["age_ms"]["value"].as_u64() {
        parts.push(format!("age {}", duration(age)));
    }
    if let Some(b) = effective["bytes"]["value"].as_u64() {
        parts.push(format!("{} per bucket", bytes(b)));
    }
    if parts.is_empty() {
        "keep everything".to_owned()
    } else {
        parts.join(", ")
    }
}

fn duration(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    for (size, unit) in UNITS {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

async fn describe(client: &Client, out: Output, name: &str) -> CliResult<()> {
    let mut info = client
        .get_json(&client.v1(&format!("tables/{}", escape(name))))
        .await?;
    let buckets = info["buckets"].as_u64().unwrap_or(0);
    let partitions: Vec<String> = info["partitions"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut offsets = Vec::new();
    for partition in &partitions {
        for bucket in 0..buckets {
            let bucket_ref = BucketRef {
                table: name.to_owned(),
                bucket: u32::try_from(bucket).unwrap_or(u32::MAX),
            };
            let o = client
                .get_json(&client.bucket_url(&bucket_ref, "offsets", partition))
                .await?;
            offsets.push(json!({
                "partition": partition,
                "bucket": bucket,
                "log_start": o["log_start"],
                "high_watermark": o["high_watermark"],
                "retained_bytes": o["retained_bytes"],
            }));
        }
    }
    if !out.human {
        info["bucket_offsets"] = json!(offsets);
        return write_line(&info.to_string());
    }
    let mut text = vec![
        format!("table {name}"),
        format!(
            "  {buckets} buckets in {} partition(s): {}",
            partitions.len(),
            partitions.join(", ")
        ),
        format!(
            "  retention: {}",
            retention_text(&info["retention"]["effective"])
        ),
    ];
    for schema in info["schemas"].as_array().into_iter().flatten() {
        text.push(format!("  schema {}:", schema["schema_id"]));
        for field in schema["schema"]["fields"].as_array().into_iter().flatten() {
            let nullable = if field["nullable"].as_bool().unwrap_or(true) {
                ""
            } else {
                " not null"
            };
            text.push(format!(
                "    {}: {}{nullable}",
                field["name"].as_str().unwrap_or(""),
                field["type"]
                    .as_str()
                    .map_or_else(|| field["type"].to_string(), str::to_owned)
            ));
        }
    }
    write_line(&text.join("\n"))?;
    let rows: Vec<Vec<String>> = offsets
        .iter()
        .map(|o| {
            vec![
                o["partition"].as_str().unwrap_or("").to_owned(),
                o["bucket"].to_string(),
                o["log_start"].to_string(),
                o["high_watermark"].to_string(),
                bytes(o["retained_bytes"].as_u64().unwrap_or(0)),
            ]
        })
        .collect();
    write_line(&table(
        &[
            "PARTITION",
            "BUCKET",
            "LOG START",
            "HIGH WATERMARK",
            "RETAINED",
        ],
        &rows,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_schemas_become_json_schemas() {
        assert_eq!(
            parse_schema("id:int64!, msg:utf8").unwrap(),
            json!({"fields": [
                {"name": "id", "type": "int64", "nullable": false},
                {"name": "msg", "type": "utf8", "nullable": true},
            ]})
        );
        let json_form = r#"{"fields": [{"name": "a", "type": "bool"}]}"#;
        assert_eq!(parse_schema(json_form).unwrap()["fields"][0]["name"], "a");
        assert!(parse_schema("id").unwrap_err().contains("needs a type"));
        assert_eq!(
            parse_schema("price:Decimal128(10, 2),n:int32").unwrap()["fields"][0]["type"],
            "Decimal128(10, 2)"
        );
        assert!(parse_schema("").is_err());
        assert_eq!(duration(3_600_000), "1h");
        assert_eq!(duration(90_000), "90s");
    }
}
