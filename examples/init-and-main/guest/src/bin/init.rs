//! The init container: prepares the work directory the main container will read.

fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/work".into());
    std::fs::write(
        format!("{dir}/message.txt"),
        "prepared by the init container\n",
    )?;
    println!("wrote {dir}/message.txt");
    Ok(())
}
