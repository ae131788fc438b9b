//! Writes the JSON Schema files of the wire contract from the Rust types.
use std::path::Path;

fn main() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/v1");
    std::fs::create_dir_all(&dir)?;
    for (name, content) in apiary_schema::json_schema::generated_files() {
        std::fs::write(dir.join(name), content)?;
        println!("wrote schema/v1/{name}");
    }
    Ok(())
}
