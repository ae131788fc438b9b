//! Rewrites the generated part of `docs/configuration.md` from the key registry and the sample files
//! (see `apiary_plumbing::reference`).
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let read = |rel: &str| std::fs::read_to_string(root.join(rel));
    let generated = apiary_plumbing::reference::render(
        &read("deploy/config/agent.toml")?,
        &read("deploy/config/ingest.toml")?,
    )?;
    let page = read("docs/configuration.md")?;
    let new = apiary_plumbing::reference::splice(&page, &generated)?;
    if new == page {
        println!("docs/configuration.md is up to date");
    } else {
        std::fs::write(root.join("docs/configuration.md"), new)?;
        println!("wrote docs/configuration.md");
    }
    Ok(())
}
