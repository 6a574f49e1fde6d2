//! Writes each target's seeds into `corpus/{target}/` (after checking the harness takes them).

fn main() -> std::io::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for target in mink_fuzz::TARGETS {
        let dir = root.join(target.name);
        std::fs::create_dir_all(&dir)?;
        for (i, seed) in (target.seeds)().iter().enumerate() {
            (target.run)(seed);
            std::fs::write(dir.join(format!("seed-{i:02}")), seed)?;
        }
    }
    Ok(())
}
