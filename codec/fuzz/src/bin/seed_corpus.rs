//! Writes valid batches into `corpus/decode/` as seeds for the `decode` fuzz target.

fn main() -> std::io::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/decode");
    std::fs::create_dir_all(&dir)?;
    for (i, seed) in mink_codec_fuzz::seeds().iter().enumerate() {
        mink_codec_fuzz::run(seed);
        std::fs::write(dir.join(format!("seed-{i:02}")), seed)?;
    }
    Ok(())
}
