//! The in-instance agent alone (`kitbag-vm-agent …` = `kitbag-vm __agent …`): a QEMU guest's
//! boot time grows with its initramfs, and the whole server is ten times larger (release,
//! stripped: 1.5 MB against 16 MB).

fn main() -> anyhow::Result<()> {
    // The server runs an agent beside it only when it is of its own version.
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("{}", kitbag_vm::agent_link::agent_version());
        return Ok(());
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .skip_while(|a| a == "__agent")
        .collect();
    kitbag_vm::agent::main(&args)
}
