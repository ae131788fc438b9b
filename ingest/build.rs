// `sqlx::migrate!` embeds the files of `../migrations` at compile time, but cargo does not know to rebuild
// when a migration is added (sqlx's documented fix: watch the directory).
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
