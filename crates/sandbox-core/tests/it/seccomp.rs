//! The seccomp wall, checked by running the compiled program: a small classic-BPF interpreter
//! evaluates each case's `seccomp_data` the way the kernel would, so a wrong jump offset or a
//! rule on the wrong argument fails here, not in a sandbox.

use sandbox_core::{Arch, Insn, SeccompAction, WALL, compile, disassemble};

const AUDIT_X86_64: u32 = 0xc000_003e;
const AUDIT_AARCH64: u32 = 0xc000_00b7;
const AUDIT_I386: u32 = 0x4000_0003;

/// What the kernel would do: runs `program` over `struct seccomp_data`.
fn evaluate(program: &[Insn], nr: u32, arch: u32, args: [u64; 6]) -> SeccompAction {
    let mut data = Vec::new();
    data.extend_from_slice(&nr.to_le_bytes());
    data.extend_from_slice(&arch.to_le_bytes());
    data.extend_from_slice(&0u64.to_le_bytes());
    for arg in args {
        data.extend_from_slice(&arg.to_le_bytes());
    }
    let word = |offset: u32| {
        let o = offset as usize;
        u32::from_le_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]])
    };
    let (mut pc, mut acc) = (0usize, 0u32);
    loop {
        let insn = program[pc];
        let jump = |taken: bool| pc + 1 + usize::from(if taken { insn.jt } else { insn.jf });
        pc = match insn.code {
            0x20 => {
                acc = word(insn.k);
                pc + 1
            }
            0x15 => jump(acc == insn.k),
            0x35 => jump(acc >= insn.k),
            0x45 => jump(acc & insn.k != 0),
            0x05 => pc + 1 + insn.k as usize,
            0x06 => {
                return match insn.k {
                    0x7fff_0000 => SeccompAction::Allow,
                    0x8000_0000 => SeccompAction::KillProcess,
                    k if k & 0xffff_0000 == 0x0005_0000 => {
                        SeccompAction::Errno((k & 0xffff) as u16)
                    }
                    k => panic!("unexpected return {k:#x}"),
                };
            }
            code => panic!("unexpected opcode {code:#x} at {pc}"),
        };
        assert!(pc < program.len(), "jumped past the end");
    }
}

fn check(arch: Arch, audit: u32, name: &str, args: [u64; 6]) -> String {
    let program = compile(WALL, arch);
    let Some(nr) = arch.syscall(name) else { return format!("{name}: absent") };
    let args_text: Vec<String> = args.iter().take(4).map(|a| format!("{a:#o}")).collect();
    format!("{name}({}) -> {:?}", args_text.join(", "), evaluate(&program, nr, audit, args))
}

const O_CREAT: u64 = 0o100;
const O_RDONLY: u64 = 0;
const O_TMPFILE: u64 = 0o20200000;

#[test]
fn decisions_x86_64() {
    let cases: Vec<(&str, [u64; 6])> = vec![
        ("chmod", [0, 0o755, 0, 0, 0, 0]),
        ("chmod", [0, 0o4755, 0, 0, 0, 0]),
        ("chmod", [0, 0o2755, 0, 0, 0, 0]),
        ("chmod", [0, 0o1777, 0, 0, 0, 0]),
        // The upper half of a mode_t argument is ignored by the kernel and by the wall.
        ("chmod", [0, (0xffff_ffff << 32) | 0o755, 0, 0, 0, 0]),
        ("fchmod", [3, 0o4755, 0, 0, 0, 0]),
        ("fchmod", [3, 0o644, 0, 0, 0, 0]),
        ("fchmodat", [0, 0, 0o6755, 0, 0, 0]),
        ("fchmodat", [0, 0, 0o755, 0, 0, 0]),
        ("fchmodat2", [0, 0, 0o4711, 0, 0, 0]),
        ("creat", [0, 0o4755, 0, 0, 0, 0]),
        ("creat", [0, 0o644, 0, 0, 0, 0]),
        ("open", [0, O_CREAT, 0o4755, 0, 0, 0]),
        ("open", [0, O_CREAT, 0o644, 0, 0, 0]),
        // Without O_CREAT the mode argument is garbage and must not matter.
        ("open", [0, O_RDONLY, 0o7777, 0, 0, 0]),
        ("openat", [0, 0, O_CREAT | 0o1, 0o6755, 0, 0]),
        ("openat", [0, 0, O_TMPFILE, 0o4700, 0, 0]),
        ("openat", [0, 0, O_RDONLY, 0o4755, 0, 0]),
        ("openat", [0, 0, O_CREAT, 0o600, 0, 0]),
        ("openat2", [0, 0, 0, 0, 0, 0]),
        ("mknod", [0, 0o104755, 0, 0, 0, 0]),
        ("mknodat", [0, 0, 0o10644, 0, 0, 0]),
        ("setxattr", [0, 0, 0, 0, 0, 0]),
        ("fsetxattr", [0, 0, 0, 0, 0, 0]),
        ("setxattrat", [0, 0, 0, 0, 0, 0]),
        ("clone", [0x1000_0000 | 0x11, 0, 0, 0, 0, 0]),
        ("clone", [0x0120_0011, 0, 0, 0, 0, 0]),
        ("unshare", [0x1002_0000, 0, 0, 0, 0, 0]),
        ("unshare", [0x0002_0000, 0, 0, 0, 0, 0]),
        ("clone3", [0, 0, 0, 0, 0, 0]),
        ("io_uring_setup", [0, 0, 0, 0, 0, 0]),
        ("ioctl", [0, 0x5412, 0, 0, 0, 0]),
        // TIOCSTI with garbage in the upper half: the kernel takes an unsigned int.
        ("ioctl", [0, 0xdead_0000_0000_5412, 0, 0, 0, 0]),
        ("ioctl", [0, 0x541c, 0, 0, 0, 0]),
        ("ioctl", [0, 0x5401, 0, 0, 0, 0]),
        ("keyctl", [0, 0, 0, 0, 0, 0]),
        ("add_key", [0, 0, 0, 0, 0, 0]),
        ("ptrace", [16, 1, 0, 0, 0, 0]),
        ("process_vm_readv", [1, 0, 1, 0, 1, 0]),
        ("process_vm_writev", [1, 0, 1, 0, 1, 0]),
        ("pidfd_getfd", [3, 0, 0, 0, 0, 0]),
        ("bpf", [0, 0, 0, 0, 0, 0]),
        ("perf_event_open", [0, 0, 0o777777777777, 0, 0, 0]),
        ("userfaultfd", [0, 0, 0, 0, 0, 0]),
        ("mount", [0, 0, 0, 0, 0, 0]),
        ("umount2", [0, 2, 0, 0, 0, 0]),
        ("pivot_root", [0, 0, 0, 0, 0, 0]),
        ("setns", [3, 0, 0, 0, 0, 0]),
        ("fsopen", [0, 0, 0, 0, 0, 0]),
        ("open_tree", [0, 0, 0, 0, 0, 0]),
        ("mount_setattr", [0, 0, 0, 0, 0, 0]),
        ("init_module", [0, 0, 0, 0, 0, 0]),
        ("finit_module", [0, 0, 0, 0, 0, 0]),
        ("kexec_load", [0, 0, 0, 0, 0, 0]),
        ("open_by_handle_at", [0, 0, 0, 0, 0, 0]),
        ("name_to_handle_at", [0, 0, 0, 0, 0, 0]),
        ("clock_settime", [0, 0, 0, 0, 0, 0]),
        ("syslog", [3, 0, 0, 0, 0, 0]),
        ("reboot", [0, 0, 0, 0, 0, 0]),
        ("iopl", [3, 0, 0, 0, 0, 0]),
        // The execution domains Docker allows, the query, and two it does not.
        ("personality", [0, 0, 0, 0, 0, 0]),
        ("personality", [0x8, 0, 0, 0, 0, 0]),
        ("personality", [0x2_0000, 0, 0, 0, 0, 0]),
        ("personality", [0x2_0008, 0, 0, 0, 0, 0]),
        ("personality", [0xffff_ffff, 0, 0, 0, 0, 0]),
        ("personality", [0xdead_0000_ffff_ffff, 0, 0, 0, 0, 0]),
        ("personality", [0x4_0000, 0, 0, 0, 0, 0]),
        ("personality", [0x40_0000, 0, 0, 0, 0, 0]),
        ("personality", [0x1, 0, 0, 0, 0, 0]),
    ];
    let mut out: Vec<String> = cases
        .into_iter()
        .map(|(name, args)| check(Arch::X86_64, AUDIT_X86_64, name, args))
        .collect();
    let program = compile(WALL, Arch::X86_64);
    // Unlisted syscalls pass, among them the neighbours of denied ones a Python program uses:
    // its own memory policy (OpenBLAS, libnuma), signals to its children, pidfds, prctl.
    // x32 and foreign architectures do not pass.
    for (name, nr) in [
        ("read", 0),
        ("kill", 62),
        ("prctl", 157),
        ("mbind", 237),
        ("set_mempolicy", 238),
        ("get_mempolicy", 239),
        ("pidfd_open", 434),
        ("pidfd_send_signal", 424),
    ] {
        out.push(format!("{name} -> {:?}", evaluate(&program, nr, AUDIT_X86_64, [0; 6])));
    }
    out.push(format!("x32 chmod -> {:?}", evaluate(&program, 0x4000_005a, AUDIT_X86_64, [0; 6])));
    out.push(format!("i386 -> {:?}", evaluate(&program, 15, AUDIT_I386, [0; 6])));
    insta::assert_snapshot!(out.join("\n"));
}

#[test]
fn decisions_aarch64() {
    let cases: Vec<(&str, [u64; 6])> = vec![
        ("chmod", [0, 0o4755, 0, 0, 0, 0]),
        ("fchmodat", [0, 0, 0o4755, 0, 0, 0]),
        ("fchmodat", [0, 0, 0o755, 0, 0, 0]),
        ("openat", [0, 0, O_CREAT, 0o4755, 0, 0]),
        ("openat", [0, 0, O_RDONLY, 0o4755, 0, 0]),
        ("clone", [0x1000_0011, 0, 0, 0, 0, 0]),
        ("clone3", [0, 0, 0, 0, 0, 0]),
        ("ioctl", [0, 0x5412, 0, 0, 0, 0]),
        ("ioctl", [0, 0x5401, 0, 0, 0, 0]),
        ("ptrace", [16, 1, 0, 0, 0, 0]),
        ("keyctl", [0, 0, 0, 0, 0, 0]),
        ("mount", [0, 0, 0, 0, 0, 0]),
        ("setns", [3, 0, 0, 0, 0, 0]),
        ("bpf", [0, 0, 0, 0, 0, 0]),
        ("open_by_handle_at", [0, 0, 0, 0, 0, 0]),
        ("personality", [0xffff_ffff, 0, 0, 0, 0, 0]),
        ("personality", [0x4_0000, 0, 0, 0, 0, 0]),
        ("iopl", [3, 0, 0, 0, 0, 0]),
    ];
    let mut out: Vec<String> = cases
        .into_iter()
        .map(|(name, args)| check(Arch::Aarch64, AUDIT_AARCH64, name, args))
        .collect();
    let program = compile(WALL, Arch::Aarch64);
    out.push(format!("x86_64 data -> {:?}", evaluate(&program, 90, AUDIT_X86_64, [0; 6])));
    insta::assert_snapshot!(out.join("\n"));
}

/// Whether `rule`'s checks all hold for `args` (low 32 bits, as the kernel and the wall read them).
fn holds(rule: &sandbox_core::SeccompRule, args: &[u64; 6]) -> bool {
    rule.checks.iter().all(|check| match *check {
        sandbox_core::ArgCheck::AnyBit { arg, mask } => args[arg as usize] as u32 & mask != 0,
        sandbox_core::ArgCheck::Equals { arg, value } => args[arg as usize] as u32 == value,
    })
}

/// Every rule of the wall is reachable: for each, a call that matches it and no earlier rule
/// of its syscall gets its action, on every architecture that has the syscall.
#[test]
fn every_rule_fires() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let audit = if arch == Arch::X86_64 { AUDIT_X86_64 } else { AUDIT_AARCH64 };
        let program = compile(WALL, arch);
        for (i, rule) in WALL.iter().enumerate() {
            let Some(nr) = arch.syscall(rule.syscall) else { continue };
            // The rule's own values over a background of zeros, then of a value no check names
            // (an unconditional rule after `Equals { value: 0 }` is reached only off zero).
            let found = [0u64, 0x5a5a_5a5a].into_iter().find_map(|fill| {
                let mut args = [fill; 6];
                for check in rule.checks {
                    match *check {
                        sandbox_core::ArgCheck::AnyBit { arg, mask } => {
                            args[arg as usize] |= u64::from(mask)
                        }
                        sandbox_core::ArgCheck::Equals { arg, value } => {
                            args[arg as usize] = u64::from(value)
                        }
                    }
                }
                let earlier =
                    WALL[..i].iter().any(|r| r.syscall == rule.syscall && holds(r, &args));
                (holds(rule, &args) && !earlier).then_some(args)
            });
            let Some(args) = found else {
                panic!("{arch:?} {rule:?} is shadowed by earlier rules")
            };
            assert_eq!(evaluate(&program, nr, audit, args), rule.action, "{arch:?} {rule:?}");
        }
    }
}

/// What the wall decides, read off the rules themselves: a syscall's first rule that holds,
/// else allow.
fn decided(arch: Arch, nr: u32, args: &[u64; 6]) -> SeccompAction {
    WALL.iter()
        .filter(|r| arch.syscall(r.syscall) == Some(nr))
        .find(|r| holds(r, args))
        .map_or(SeccompAction::Allow, |r| r.action)
}

/// The program's search over syscall numbers loses nothing: every number (those the rules
/// name, their neighbours, every other one up to well past the tables' end) under argument
/// values each check looks at gets exactly what the rules decide.
#[test]
fn every_number_is_decided_by_its_rules() {
    let mut values: Vec<u64> = vec![0, u64::MAX, 0x5a5a_5a5a];
    for rule in WALL {
        for check in rule.checks {
            match *check {
                sandbox_core::ArgCheck::AnyBit { mask, .. } => values.push(u64::from(mask)),
                sandbox_core::ArgCheck::Equals { value, .. } => values.push(u64::from(value)),
            }
        }
    }
    values.sort_unstable();
    values.dedup();
    // Every argument the same value, then each a different one (rotating through the list, so
    // checks on different arguments meet different values).
    let n = values.len();
    let mut cases: Vec<[u64; 6]> = values.iter().map(|v| [*v; 6]).collect();
    cases.extend((0..n).map(|i| std::array::from_fn(|a| values[(i + a * 7) % n])));
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let audit = if arch == Arch::X86_64 { AUDIT_X86_64 } else { AUDIT_AARCH64 };
        let program = compile(WALL, arch);
        for nr in 0..2048u32 {
            for args in &cases {
                assert_eq!(
                    evaluate(&program, nr, audit, *args),
                    decided(arch, nr, args),
                    "{arch:?} nr {nr} args {args:x?}"
                );
            }
        }
    }
}

#[test]
fn listing() {
    insta::assert_snapshot!(disassemble(&compile(WALL, Arch::X86_64)));
}

#[test]
fn bytes_are_sock_filters() {
    let program = compile(WALL, Arch::X86_64);
    let bytes = sandbox_core::bpf(Arch::X86_64);
    assert_eq!(bytes.len(), program.len() * 8);
    assert_eq!(&bytes[..8], &[0x20, 0, 0, 0, 4, 0, 0, 0]);
}

/// The families are the wall's own list of `EPERM` rules: each such syscall in exactly one
/// family, nothing in a family that the wall does not refuse with `EPERM` (the conformance
/// suite's one case per family relies on it).
#[test]
fn families_cover_every_eperm_rule_once() {
    let eperm: std::collections::BTreeSet<&str> =
        WALL.iter().filter(|r| r.action == SeccompAction::Errno(1)).map(|r| r.syscall).collect();
    let mut seen = std::collections::BTreeMap::new();
    for family in sandbox_core::FAMILIES {
        assert!(!family.syscalls.is_empty(), "family {} is empty", family.name);
        for call in family.syscalls {
            if let Some(other) = seen.insert(*call, family.name) {
                panic!("{call} is in both {other} and {}", family.name);
            }
            assert!(eperm.contains(call), "{call} ({}) is no EPERM rule of the wall", family.name);
        }
    }
    let missing: Vec<&&str> = eperm.iter().filter(|c| !seen.contains_key(*c)).collect();
    assert!(missing.is_empty(), "EPERM rules in no family: {missing:?}");
}
