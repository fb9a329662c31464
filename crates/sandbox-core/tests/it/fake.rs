//! The Sandbox protocol through the in-memory fake: code written generically against
//! `Sandbox` (the way library users write it), run against `FakeSandbox`.

use sandbox_core::{
    Captured, DirEntry, EntryKind, Error, ExecRequest, FakeCall, FakeReply, FakeSandbox, Input,
    Interactive, InteractiveExec, MASK, PutSource, Sandbox, ScrubbingSink, Secrets, ServiceSpec,
    Stream, TtySize,
};

use crate::support::block_on;

/// Library-user code: upload a project, run it, collect its output file.
async fn run_project<S: Sandbox>(
    sandbox: &S,
    archive: Vec<u8>,
) -> Result<(i32, Captured, Vec<u8>), S::Error> {
    sandbox.put(&PutSource::Tar(archive), "/work").await?;
    let mut captured = Captured::default();
    let mut request = ExecRequest::new(&["python", "main.py"]);
    request.cwd = Some("/work".to_owned());
    let outcome = sandbox.exec(&request, &mut captured).await?;
    let result = sandbox.read_file("/work/out.txt").await?;
    Ok((outcome.exit_code, captured, result))
}

fn tar(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, contents) in entries {
        let mut header = tar::Header::new_gnu();
        match contents {
            Some(contents) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(contents.len() as u64);
                header.set_mode(0o644);
                builder.append_data(&mut header, path, *contents).expect("append file");
            }
            None => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                header.set_mode(0o755);
                builder.append_data(&mut header, path, &[][..]).expect("append dir");
            }
        }
    }
    builder.into_inner().expect("finish tar")
}

#[test]
fn generic_code_runs_against_the_fake() {
    let sandbox = FakeSandbox::new("sb1");
    sandbox.on_exec(&["python", "main.py"], |request, fs| {
        let source = fs.read("/work/main.py").map(<[u8]>::to_vec).unwrap_or_default();
        fs.write("/work/out.txt", &source).expect("write");
        FakeReply::exit(0).stdout(&format!("ran in {}\n", request.cwd.as_deref().unwrap_or("?")))
    });
    let archive = tar(&[("main.py", Some(b"print(1)\n")), ("data", None)]);
    let (code, captured, result) = block_on(run_project(&sandbox, archive)).expect("runs");
    assert_eq!(code, 0);
    assert_eq!(captured.stdout_lossy(), "ran in /work\n");
    assert_eq!(result, b"print(1)\n");
    let calls: Vec<String> = sandbox
        .calls()
        .iter()
        .map(|call| match call {
            FakeCall::Put { source: PutSource::Tar(archive), dest } => {
                format!("Put {{ source: Tar(<{} bytes>), dest: {dest:?} }}", archive.len())
            }
            other => format!("{other:?}"),
        })
        .collect();
    insta::assert_snapshot!(calls.join("\n"));
}

#[test]
fn longest_prefix_wins_and_later_overrides() {
    let sandbox = FakeSandbox::new("sb");
    sandbox.on_exec_reply(&[], FakeReply::exit(1).stderr("catch-all\n"));
    sandbox.on_exec_reply(&["pip"], FakeReply::exit(2));
    sandbox.on_exec_reply(&["pip", "install"], FakeReply::exit(3));
    sandbox.on_exec_reply(&["pip"], FakeReply::exit(4));
    let code = |argv: &[&str]| {
        block_on(sandbox.exec(&ExecRequest::new(argv), &mut Captured::default()))
            .expect("exec")
            .exit_code
    };
    assert_eq!(code(&["pip", "install", "x"]), 3);
    assert_eq!(code(&["pip", "list"]), 4);
    assert_eq!(code(&["ls"]), 1);
}

#[test]
fn unknown_command_exits_127() {
    let sandbox = FakeSandbox::new("sb");
    let mut captured = Captured::default();
    let outcome =
        block_on(sandbox.exec(&ExecRequest::new(&["nope"]), &mut captured)).expect("exec");
    assert_eq!(outcome.exit_code, 127);
    assert_eq!(captured.stderr_lossy(), "fake-sandbox: nope: command not found\n");
}

#[test]
fn chunks_stream_in_order_and_scrub_across_boundaries() {
    let sandbox = FakeSandbox::new("sb");
    sandbox.on_exec_reply(
        &["env"],
        FakeReply::exit(0)
            .stdout("TOKEN=ghp_sec")
            .stderr("warn\n")
            .chunk(Stream::Stdout, b"ret123\n")
            .timed_out(),
    );
    let mut secrets = Secrets::new();
    secrets.register("ghp_secret123").expect("register");
    let mut sink = ScrubbingSink::new(&secrets, Captured::default());
    let outcome = block_on(sandbox.exec(&ExecRequest::new(&["env"]), &mut sink)).expect("exec");
    assert!(outcome.timed_out);
    let captured = sink.finish();
    assert_eq!(captured.stdout_lossy(), format!("TOKEN={MASK}\n"));
    assert_eq!(captured.stderr_lossy(), "warn\n");
}

#[test]
fn files_write_read_list() {
    let sandbox = FakeSandbox::new("sb");
    block_on(sandbox.write_file("/a/b/c.txt", b"hello")).expect("write");
    block_on(sandbox.write_file("/a/top.txt", b"x")).expect("write");
    assert_eq!(block_on(sandbox.read_file("/a/./b/../b/c.txt")).expect("read"), b"hello");
    assert_eq!(
        block_on(sandbox.list_dir("/a")).expect("list"),
        [
            DirEntry { name: "b".into(), kind: EntryKind::Dir, size: 0 },
            DirEntry { name: "top.txt".into(), kind: EntryKind::File, size: 1 },
        ]
    );
    assert_eq!(
        block_on(sandbox.list_dir("/")).expect("list"),
        [DirEntry { name: "a".into(), kind: EntryKind::Dir, size: 0 }]
    );
    let errors = [
        block_on(sandbox.read_file("/missing")).expect_err("missing"),
        block_on(sandbox.read_file("/a")).expect_err("dir"),
        block_on(sandbox.read_file("rel")).expect_err("relative"),
        block_on(sandbox.list_dir("/a/top.txt")).expect_err("file"),
        block_on(sandbox.write_file("/a/top.txt/x", b"")).expect_err("under a file"),
        block_on(sandbox.write_file("/a/b", b"")).expect_err("onto a dir"),
    ];
    let out: Vec<String> = errors.iter().map(ToString::to_string).collect();
    insta::assert_snapshot!(out.join("\n"));
}

#[test]
fn put_unpacks_long_names_and_refuses_escapes_atomically() {
    let sandbox = FakeSandbox::new("sb");
    let long = format!("{}/file.txt", "d".repeat(120));
    let archive =
        tar(&[("pkg/", None), ("pkg/__init__.py", Some(b"")), (long.as_str(), Some(b"L"))]);
    block_on(sandbox.put(&PutSource::Tar(archive), "/srv")).expect("put");
    let fs = sandbox.fs();
    assert!(fs.exists("/srv/pkg/__init__.py"));
    assert_eq!(fs.read(&format!("/srv/{long}")).expect("long name"), b"L");

    // A member climbing out of the destination fails and leaves nothing behind.
    let mut evil = tar(&[("ok.txt", Some(b"1")), ("zzzzzz/x", Some(b"2"))]);
    let at = evil.windows(8).position(|w| w == b"zzzzzz/x").expect("name in header");
    evil[at..at + 8].copy_from_slice(b"../../x\0");
    fix_checksum(&mut evil[at - (at % 512)..at - (at % 512) + 512]);
    let error = block_on(sandbox.put(&PutSource::Tar(evil), "/srv")).expect_err("escape");
    assert_eq!(
        error.to_string(),
        "invalid tar archive: entry `../../x` escapes the destination `/srv`"
    );
    assert!(!sandbox.fs().exists("/srv/ok.txt"));

    let error = block_on(sandbox.put(&PutSource::Tar(vec![1; 512]), "/srv")).expect_err("junk");
    assert!(matches!(error, Error::InvalidTar { .. }), "{error}");
    let error =
        block_on(sandbox.put(&PutSource::HostPath("/etc".into()), "/srv")).expect_err("host path");
    assert!(matches!(error, Error::Unsupported { .. }), "{error}");
}

fn fix_checksum(header: &mut [u8]) {
    header[148..156].fill(b' ');
    let sum: u32 = header.iter().map(|&byte| u32::from(byte)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

#[test]
fn pax_path_records_are_honoured() {
    let mut builder = tar::Builder::new(Vec::new());
    let long = format!("{}/pax.txt", "p".repeat(150));
    builder.append_pax_extensions([("path", long.as_bytes())]).expect("pax");
    let mut header = tar::Header::new_ustar();
    header.set_path("short.txt").expect("path");
    header.set_size(3);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append(&header, &b"pax"[..]).expect("append");
    let archive = builder.into_inner().expect("finish");
    let sandbox = FakeSandbox::new("sb");
    block_on(sandbox.put(&PutSource::Tar(archive), "/p")).expect("put");
    assert_eq!(sandbox.fs().read(&format!("/p/{long}")).expect("pax path"), b"pax");
}

#[test]
fn services_and_stop() {
    let sandbox = FakeSandbox::new("sb");
    sandbox.publish(8000);
    let spec = ServiceSpec {
        argv: vec!["python".into(), "-m".into(), "http.server".into()],
        port: 8000,
        env: Vec::new(),
    };
    let service = block_on(sandbox.start_service(&spec)).expect("start");
    assert_eq!(service.url, "http://127.0.0.1:8000");
    let again = block_on(sandbox.start_service(&spec)).expect_err("port taken");
    assert_eq!(again, Error::PortInUse { port: 8000 });
    block_on(sandbox.stop_service(&service)).expect("stop service");
    assert!(sandbox.services().is_empty());
    let gone = block_on(sandbox.stop_service(&service)).expect_err("already stopped");
    assert!(matches!(gone, Error::NoSuchService { .. }));

    block_on(sandbox.stop()).expect("stop");
    assert!(sandbox.is_stopped());
    let error = block_on(sandbox.read_file("/x")).expect_err("stopped");
    assert_eq!(error.to_string(), "sandbox `sb` is stopped");
    assert_eq!(sandbox.calls().last(), Some(&FakeCall::ReadFile("/x".into())));
}

/// The fake's futures are `Send`, so they can be spawned on a multi-threaded runtime.
#[test]
fn futures_are_send() {
    fn assert_send<T: Send>(_: T) {}
    let sandbox = FakeSandbox::new("sb");
    let mut captured = Captured::default();
    let request = ExecRequest::new(&["true"]);
    assert_send(sandbox.exec(&request, &mut captured));
    assert_send(sandbox.read_file("/x"));
}

mod properties {
    use proptest::prelude::*;
    use sandbox_core::{Error, FakeSandbox, PutSource, Sandbox};

    use crate::support::block_on;

    proptest! {
        /// Arbitrary bytes as a tar never panic and never half-apply.
        #[test]
        fn junk_tar_is_refused_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
            let sandbox = FakeSandbox::new("sb");
            match block_on(sandbox.put(&PutSource::Tar(bytes), "/dest")) {
                Ok(()) => prop_assert!(sandbox.fs().exists("/dest")),
                Err(Error::InvalidTar { .. } | Error::Unsupported { .. } | Error::NotADirectory { .. } | Error::IsADirectory { .. }) => {
                    prop_assert!(!sandbox.fs().exists("/dest"));
                }
                Err(other) => prop_assert!(false, "unexpected error {other}"),
            }
        }

        /// What is written can be read back under any spelling of the same path.
        #[test]
        fn write_then_read(parts in prop::collection::vec("[a-c]{1,2}", 1..4), contents in prop::collection::vec(any::<u8>(), 0..64)) {
            let sandbox = FakeSandbox::new("sb");
            let path = format!("/{}", parts.join("/"));
            block_on(sandbox.write_file(&path, &contents)).expect("write");
            let spelled = format!("/./{}/", parts.join("//"));
            prop_assert_eq!(block_on(sandbox.read_file(spelled.trim_end_matches('/'))).expect("read"), contents);
        }
    }
}

/// Interactive execs on the fake: stdin arrives as streamed (after `request.stdin`, in order,
/// to the end of input or the channel's end); a tty is refused, not faked.
#[test]
fn interactive_stdin_is_streamed_and_a_tty_refused() {
    let sandbox = FakeSandbox::new("fake");
    sandbox.on_exec(&["wc", "-c"], |request, _| {
        FakeReply::exit(0).stdout(&format!("{}\n", request.stdin.len()))
    });
    let request = ExecRequest { stdin: b"ab".to_vec(), ..ExecRequest::new(&["wc", "-c"]) };
    let (input, io) = Interactive::channel(None);
    input.send(Input::Stdin(vec![b'x'; 1 << 20])).expect("send");
    input.send(Input::Resize(TtySize { rows: 1, cols: 1 })).expect("send");
    input.send(Input::Eof).expect("send");
    input.send(Input::Stdin(b"after the end".to_vec())).expect("send");
    let mut out = Captured::default();
    let outcome = block_on(sandbox.exec_interactive(&request, io, &mut out)).expect("exec");
    assert_eq!((outcome.exit_code, out.stdout_lossy()), (0, format!("{}\n", 2 + (1 << 20))));

    // Senders gone without an `Eof`: the end of input all the same.
    let (input, io) = Interactive::channel(None);
    input.send(Input::Stdin(b"xyz".to_vec())).expect("send");
    drop(input);
    let mut out = Captured::default();
    block_on(sandbox.exec_interactive(&ExecRequest::new(&["wc", "-c"]), io, &mut out))
        .expect("exec");
    assert_eq!(out.stdout_lossy(), "3\n");

    let (_input, io) = Interactive::channel(Some(TtySize { rows: 24, cols: 80 }));
    let refused = block_on(sandbox.exec_interactive(&request, io, &mut Captured::default()));
    let Err(error @ Error::Unsupported { .. }) = refused else { panic!("{refused:?}") };
    assert!(error.to_string().starts_with("a tty is not supported by the fake sandbox"), "{error}");
    assert_eq!(sandbox.calls().len(), 2, "a refused tty runs nothing");
}

/// The interactive contract the real session engines are held to, stdin part (the fake has
/// no tty), with handlers that do what the contract's commands do.
#[test]
fn the_interactive_stdin_contract_holds_for_the_fake() {
    let sandbox = FakeSandbox::new("fake");
    sandbox.on_exec(&["wc", "-c"], |request, _| {
        FakeReply::exit(0).stdout(&format!("{}\n", request.stdin.len()))
    });
    sandbox
        .on_exec(&["cat"], |request, _| FakeReply::exit(0).chunk(Stream::Stdout, &request.stdin));
    sandbox.on_exec(&["sh", "-c"], |request, _| match request.stdin.as_slice() {
        b"some" => FakeReply::exit(3).stdout("eof\n"),
        _ => FakeReply::exit(1),
    });
    crate::interactive::stdin_contract("fake", &mut |request, io| {
        let mut out = Captured::default();
        let outcome = block_on(sandbox.exec_interactive(request, io, &mut out)).expect("exec");
        (outcome, out)
    });
}
