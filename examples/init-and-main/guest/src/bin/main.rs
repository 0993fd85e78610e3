//! The main container: reads what the init container prepared. Built as a preview2 component.

fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/work".into());
    let message = std::fs::read_to_string(format!("{dir}/message.txt"))?;
    print!("read: {message}");
    Ok(())
}
