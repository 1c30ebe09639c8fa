//! Go's `flag` syntax for every command, read against the flags each command declares.
//!
//! Consul's commands read their arguments with Go's `flag` package, and operators type them
//! that way: `-flag` or `--flag`; `-flag=value` or `-flag value` for a flag that takes a
//! value; `-flag` or `-flag=<anything strconv.ParseBool takes>` for a boolean, which never
//! takes the next argument; integers in Go's notation (`0x1f`, `0o17`, `017`, `1_000`); the
//! last of a repeated flag wins unless the flag collects its values; `--` ends the flags, and
//! so does the first argument that is not one.
//!
//! Each command still declares its flags once, to clap (`#[derive(Args)]`: name, type,
//! default, description). [`read`] walks that declaration: it finds the command the leading
//! names select, reads the rest the way Go would, checks what Go's flag types check in Go's
//! own words, and hands clap an argument list in the only form it then has to read — the
//! command path, every flag as `--name=value` (or a bare `--name` for a switch that is on),
//! and the positional arguments after `--`. clap no longer guesses whether `-1` is a value or
//! whether `-recurse=true` names a flag.
//!
//! Invariants: clap never sees a flag the command does not declare, a boolean or an integer
//! Go would refuse, a flag after the positional arguments began, or more positional arguments
//! than the command has room for; what clap can still refuse is a value one of our own value
//! parsers refuses, and [`clap_error_line`] turns that into one line. `-h`, `-help` and
//! `--help` anywhere before `--` ask for the usage, as with Consul's CLI, except inside a child
//! command line (`lock PREFIX CMD…`, `watch … CMD…`), which is handed over untouched.

use clap::builder::ArgAction;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use std::any::TypeId;

/// Exit code of a command whose arguments were refused: Consul's commands return 1 after a
/// failed `flags.Parse` (Go's own exit code 2 belongs to `flag.ExitOnError`, which Consul
/// does not use).
pub const USAGE_EXIT_CODE: i32 = 1;
/// Exit code of an unknown command, as Consul's command dispatcher (mitchellh/cli) returns it.
pub const UNKNOWN_COMMAND_EXIT_CODE: i32 = 127;
/// Commands whose refused command line exits with another code than [`USAGE_EXIT_CODE`]:
/// Consul's `intention check` keeps 1 for "denied", and it and `intention match` return 2
/// when their flags do not parse.
const USAGE_EXIT_CODE_EXCEPTIONS: [(&str, i32); 2] =
    [("intention check", 2), ("intention match", 2)];

/// The exit code of a refused command line for the command at `path`.
pub fn usage_exit_code(path: &[String]) -> i32 {
    let name = path.join(" ");
    USAGE_EXIT_CODE_EXCEPTIONS
        .iter()
        .find(|(command, _)| *command == name)
        .map_or(USAGE_EXIT_CODE, |(_, code)| *code)
}

/// What a command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Reading {
    /// Run the command at `path` (names after the program): `args` is the argument list for
    /// clap, program name first.
    Run {
        path: Vec<String>,
        args: Vec<String>,
    },
    /// Print the usage of the command at this path on standard output and exit 0.
    Help(Vec<String>),
    /// A group of commands named without one of its subcommands: print its usage on standard
    /// error and exit with `code`, as Consul does for `consul kv` (1) and a bare `consul`
    /// (127).
    GroupUsage { path: Vec<String>, code: i32 },
    /// Refuse the command line: one line on standard error, a pointer to the usage, and
    /// the exit code.
    Refuse {
        path: Vec<String>,
        message: String,
        code: i32,
    },
}

/// Whether an argument asks for the usage, as Consul's command dispatcher reads it.
pub fn is_help(arg: &str) -> bool {
    matches!(arg, "-h" | "-help" | "--help")
}

/// What a declared flag is, for Go's rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagKind {
    /// A boolean clap stores as on (`ArgAction::SetTrue`): `-flag` or `-flag=<bool>`; given to
    /// clap as a bare `--flag` when on, left out when off.
    Switch,
    /// A boolean clap parses from a value (`bool` or `Option<bool>`, as when its default is
    /// true or when "not given" differs from "false"): given to clap as `--flag=true|false`.
    Boolean,
    /// An integer of the Rust type's range, written in Go's notation.
    Integer { min: i128, max: i128 },
    /// A Go duration (`1m30s`).
    Duration,
    /// Any other value, handed to clap as written.
    Text,
}

impl FlagKind {
    /// The kind of a declared flag, from its clap action and value type.
    pub fn of(arg: &clap::Arg) -> FlagKind {
        if matches!(arg.get_action(), ArgAction::SetTrue) {
            return FlagKind::Switch;
        }
        let type_id = arg.get_value_parser().type_id();
        if type_id == TypeId::of::<bool>() {
            return FlagKind::Boolean;
        }
        if type_id == TypeId::of::<std::time::Duration>() {
            return FlagKind::Duration;
        }
        INTEGER_TYPES
            .iter()
            .find(|(id, _, _)| type_id == id())
            .map(|(_, min, max)| FlagKind::Integer {
                min: *min,
                max: *max,
            })
            .unwrap_or(FlagKind::Text)
    }

    /// Whether the flag stands alone (`-flag`) rather than taking the next argument.
    pub fn is_boolean(self) -> bool {
        matches!(self, FlagKind::Switch | FlagKind::Boolean)
    }
}

type TypeIdOf = fn() -> TypeId;

/// The integer types a flag may have, with their ranges.
const INTEGER_TYPES: [(TypeIdOf, i128, i128); 10] = [
    (TypeId::of::<u8>, 0, u8::MAX as i128),
    (TypeId::of::<u16>, 0, u16::MAX as i128),
    (TypeId::of::<u32>, 0, u32::MAX as i128),
    (TypeId::of::<u64>, 0, u64::MAX as i128),
    (TypeId::of::<usize>, 0, usize::MAX as i128),
    (TypeId::of::<i8>, i8::MIN as i128, i8::MAX as i128),
    (TypeId::of::<i16>, i16::MIN as i128, i16::MAX as i128),
    (TypeId::of::<i32>, i32::MIN as i128, i32::MAX as i128),
    (TypeId::of::<i64>, i64::MIN as i128, i64::MAX as i128),
    (TypeId::of::<isize>, isize::MIN as i128, isize::MAX as i128),
];

/// Whether clap declares this argument itself (its help and version flags), rather than the
/// command.
fn is_clap_builtin(arg: &clap::Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

/// The flags a command declares (not its positional arguments, not clap's own flags).
pub fn declared_flags(command: &clap::Command) -> impl Iterator<Item = &clap::Arg> {
    command
        .get_arguments()
        .filter(|a| !a.is_positional() && !is_clap_builtin(a))
}

/// The name a flag is typed with: its long name (every command flag has one; a one-letter
/// flag such as `lock -n` is declared with both).
pub fn flag_name(arg: &clap::Arg) -> &str {
    arg.get_long()
        .expect("every declared flag has a long name (checked by a test)")
}

/// Whether the command's last positional argument is a child command line, handed over
/// without reading (`lock PREFIX CMD…`, `watch … CMD…`).
fn takes_child_command(command: &clap::Command) -> bool {
    command
        .get_positionals()
        .any(|a| a.is_trailing_var_arg_set())
}

/// How many positional arguments the command has room for; `None` when one of them collects
/// any number.
fn positional_room(command: &clap::Command) -> Option<usize> {
    let mut room = 0;
    for arg in command.get_positionals() {
        let collects = matches!(arg.get_action(), ArgAction::Append)
            || arg
                .get_num_args()
                .is_some_and(|n| n.max_values() == usize::MAX);
        if collects {
            return None;
        }
        room += arg.get_num_args().map_or(1, |n| n.max_values());
    }
    Some(room)
}

/// Reads a command line (program name first) against the command tree.
pub fn read(argv: &[String], root: &clap::Command) -> Reading {
    let program = argv
        .first()
        .cloned()
        .unwrap_or_else(|| "praetor".to_string());
    let mut rest = argv.get(1..).unwrap_or(&[]);
    let mut command = root;
    let mut path: Vec<String> = Vec::new();
    while command.has_subcommands() {
        let Some(first) = rest.first() else {
            // `praetor` alone is an unknown (empty) command to Consul's dispatcher; a group
            // alone prints the group's usage.
            let code = if path.is_empty() {
                UNKNOWN_COMMAND_EXIT_CODE
            } else {
                USAGE_EXIT_CODE
            };
            return Reading::GroupUsage { path, code };
        };
        if is_help(first) {
            return Reading::Help(path);
        }
        match command.find_subcommand(first) {
            Some(sub) => {
                path.push(sub.get_name().to_string());
                command = sub;
                rest = &rest[1..];
            }
            None if path.is_empty() && first.starts_with('-') => {
                return Reading::Refuse {
                    path,
                    message: "Invalid flags before the subcommand. If these flags are for the subcommand, please put them after the subcommand.".to_string(),
                    code: USAGE_EXIT_CODE,
                };
            }
            None if path.is_empty() => {
                return Reading::Refuse {
                    path,
                    message: format!("Unknown command: {first}"),
                    code: UNKNOWN_COMMAND_EXIT_CODE,
                };
            }
            None => {
                return Reading::Refuse {
                    message: format!("Unknown subcommand of '{}': {first}", full_name(&path)),
                    path,
                    code: USAGE_EXIT_CODE,
                };
            }
        }
    }
    match read_flags(command, rest) {
        Ok(Some(canonical)) => {
            let mut args = Vec::with_capacity(1 + path.len() + canonical.len());
            args.push(program);
            args.extend(path.iter().cloned());
            args.extend(canonical);
            Reading::Run { path, args }
        }
        Ok(None) => Reading::Help(path),
        Err(message) => Reading::Refuse {
            code: usage_exit_code(&path),
            path,
            message,
        },
    }
}

/// The command's name as typed: `praetor kv get`.
pub fn full_name(path: &[String]) -> String {
    std::iter::once("praetor")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One flag as given: the declared argument and its value as clap should read it.
struct Given<'a> {
    arg: &'a clap::Arg,
    kind: FlagKind,
    value: String,
}

/// Reads a leaf command's arguments the way Go's `flag.FlagSet.Parse` does. `Ok(None)` asks
/// for the usage; `Ok(Some(args))` is what clap reads after the command path.
fn read_flags(command: &clap::Command, args: &[String]) -> Result<Option<Vec<String>>, String> {
    let child = takes_child_command(command);
    // Consul's dispatcher looks for a help flag in every argument before `--`, wherever it
    // stands, before the command reads its flags; a child command line is left alone.
    if !child && args.iter().take_while(|a| *a != "--").any(|a| is_help(a)) {
        return Ok(None);
    }
    let flags: Vec<&clap::Arg> = declared_flags(command).collect();
    let mut given: Vec<Given> = Vec::new();
    let mut index = 0;
    let mut positionals: &[String] = &[];
    while index < args.len() {
        let arg = &args[index];
        index += 1;
        if arg == "--" {
            positionals = &args[index..];
            break;
        }
        if arg.len() < 2 || !arg.starts_with('-') {
            positionals = &args[index - 1..];
            break;
        }
        let body = arg.strip_prefix("--").unwrap_or(&arg[1..]);
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(format!("bad flag syntax: {arg}"));
        }
        let (name, inline_value) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (body, None),
        };
        let Some(declared) = flags.iter().find(|f| flag_name(f) == name) else {
            if name == "h" || name == "help" {
                return Ok(None);
            }
            return Err(format!("flag provided but not defined: -{name}"));
        };
        let kind = FlagKind::of(declared);
        let value = if kind.is_boolean() {
            let text = inline_value.unwrap_or("true");
            let on = parse_go_bool(text).ok_or_else(|| {
                format!("invalid boolean value {text:?} for -{name}: parse error")
            })?;
            on.to_string()
        } else {
            let text = match inline_value {
                Some(text) => text,
                None => {
                    let next = args
                        .get(index)
                        .ok_or_else(|| format!("flag needs an argument: -{name}"))?;
                    index += 1;
                    next.as_str()
                }
            };
            checked_value(kind, text)
                .map_err(|cause| format!("invalid value {text:?} for flag -{name}: {cause}"))?
        };
        // The last of a repeated flag wins, unless the flag collects its values.
        if !matches!(declared.get_action(), ArgAction::Append) {
            given.retain(|g| g.arg.get_id() != declared.get_id());
        }
        given.push(Given {
            arg: declared,
            kind,
            value,
        });
    }
    if let Some(room) = positional_room(command) {
        if positionals.len() > room {
            return Err(format!(
                "Too many arguments (expected {room}, got {})",
                positionals.len()
            ));
        }
    }
    let mut canonical = Vec::with_capacity(given.len() + positionals.len() + 1);
    for g in &given {
        let name = flag_name(g.arg);
        match g.kind {
            FlagKind::Switch if g.value == "true" => canonical.push(format!("--{name}")),
            FlagKind::Switch => {}
            _ => canonical.push(format!("--{name}={}", g.value)),
        }
    }
    if !positionals.is_empty() {
        canonical.push("--".to_string());
        canonical.extend(positionals.iter().cloned());
    }
    Ok(Some(canonical))
}

/// A value checked as its Go flag type would check it, in the form clap reads; the error is
/// Go's cause (`parse error`, `value out of range`).
fn checked_value(kind: FlagKind, text: &str) -> Result<String, &'static str> {
    match kind {
        FlagKind::Integer { min, max } => {
            let signed = min < 0;
            let number = parse_go_integer(text, signed).map_err(NumberError::cause)?;
            if number < min || number > max {
                return Err(NumberError::Range.cause());
            }
            Ok(number.to_string())
        }
        FlagKind::Duration => {
            crate::proto::duration::parse_go_duration(text).map_err(|_| "parse error")?;
            Ok(text.to_string())
        }
        _ => Ok(text.to_string()),
    }
}

/// Go's `strconv.ParseBool`: what Go's boolean flags and Consul's boolean environment
/// variables (`CONSUL_HTTP_SSL`, …) accept.
pub fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Why Go's `strconv` refused a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumberError {
    Syntax,
    Range,
}

impl NumberError {
    /// The cause Go's `flag` package prints for it.
    pub fn cause(self) -> &'static str {
        match self {
            NumberError::Syntax => "parse error",
            NumberError::Range => "value out of range",
        }
    }
}

/// `strconv.ParseInt(text, 0, 128)` (or `ParseUint` when `signed` is false): an optional sign
/// (signed only), then `0x`/`0o`/`0b` for hexadecimal, octal and binary, a leading `0` for
/// octal, otherwise decimal; `_` may separate digits. Values beyond 128 bits are out of range.
pub fn parse_go_integer(text: &str, signed: bool) -> Result<i128, NumberError> {
    if text.is_empty() {
        return Err(NumberError::Syntax);
    }
    let (negative, unsigned_text) = match text.as_bytes()[0] {
        b'+' | b'-' if signed => (text.starts_with('-'), &text[1..]),
        _ => (false, text),
    };
    if unsigned_text.is_empty() {
        return Err(NumberError::Syntax);
    }
    let bytes = unsigned_text.as_bytes();
    let (radix, digits) = if bytes[0] == b'0' && bytes.len() >= 3 {
        match bytes[1].to_ascii_lowercase() {
            b'x' => (16, &unsigned_text[2..]),
            b'o' => (8, &unsigned_text[2..]),
            b'b' => (2, &unsigned_text[2..]),
            _ => (8, &unsigned_text[1..]),
        }
    } else if bytes[0] == b'0' {
        (8, &unsigned_text[1..])
    } else {
        (10, unsigned_text)
    };
    if !underscores_ok(unsigned_text) {
        return Err(NumberError::Syntax);
    }
    let mut magnitude: u128 = 0;
    let mut overflow = false;
    for c in digits.chars().filter(|c| *c != '_') {
        let digit = c.to_digit(radix).ok_or(NumberError::Syntax)?;
        match magnitude
            .checked_mul(u128::from(radix))
            .and_then(|m| m.checked_add(u128::from(digit)))
        {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
    }
    if overflow {
        return Err(NumberError::Range);
    }
    if negative {
        // The most negative i128 is one further than the most positive.
        if magnitude > i128::MAX as u128 + 1 {
            return Err(NumberError::Range);
        }
        Ok((magnitude as i128).wrapping_neg())
    } else {
        i128::try_from(magnitude).map_err(|_| NumberError::Range)
    }
}

/// Go's `underscoreOK`: `_` only between digits, or between a base prefix and a digit.
fn underscores_ok(text: &str) -> bool {
    let bytes = text.as_bytes();
    // What came last: the start, a digit (or base prefix), an underscore, or something else.
    #[derive(PartialEq)]
    enum Last {
        Start,
        Digit,
        Underscore,
        Other,
    }
    let mut last = Last::Start;
    let mut i = 0;
    let mut hex = false;
    if bytes.len() >= 2
        && bytes[0] == b'0'
        && matches!(bytes[1].to_ascii_lowercase(), b'b' | b'o' | b'x')
    {
        i = 2;
        last = Last::Digit;
        hex = bytes[1].eq_ignore_ascii_case(&b'x');
    }
    while i < bytes.len() {
        let c = bytes[i];
        i += 1;
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            last = Last::Digit;
            continue;
        }
        if c == b'_' {
            if last != Last::Digit {
                return false;
            }
            last = Last::Underscore;
            continue;
        }
        if last == Last::Underscore {
            return false;
        }
        last = Last::Other;
    }
    last != Last::Underscore
}

/// One line for an error clap still raises after [`read`]: a value one of our own parsers
/// refused, in Go's words, or clap's first line without its decoration.
pub fn clap_error_line(error: &clap::Error) -> String {
    let context = |kind: ContextKind| match error.get(kind) {
        Some(ContextValue::String(text)) => Some(text.clone()),
        Some(ContextValue::Strings(list)) => Some(list.join(", ")),
        _ => None,
    };
    match error.kind() {
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => {
            let arg = context(ContextKind::InvalidArg).unwrap_or_default();
            let value = context(ContextKind::InvalidValue).unwrap_or_default();
            let cause = std::error::Error::source(error)
                .map(|e| e.to_string())
                .unwrap_or_else(|| "parse error".to_string());
            match arg.split_whitespace().next() {
                Some(flag) if flag.starts_with("--") => format!(
                    "invalid value {value:?} for flag -{}: {cause}",
                    flag.trim_start_matches('-')
                ),
                _ => format!("invalid value {value:?} for {arg}: {cause}"),
            }
        }
        ErrorKind::MissingRequiredArgument => {
            let missing = context(ContextKind::InvalidArg).unwrap_or_default();
            format!("Missing required argument: {missing}")
        }
        _ => {
            let rendered = error.to_string();
            let first = rendered.lines().next().unwrap_or("invalid arguments");
            first.trim_start_matches("error: ").to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn tree() -> Command {
        Command::new("praetor")
            .disable_help_flag(true)
            .disable_help_subcommand(true)
            .subcommand(
                Command::new("kv").subcommand(
                    Command::new("get")
                        .arg(
                            Arg::new("recurse")
                                .long("recurse")
                                .action(ArgAction::SetTrue),
                        )
                        .arg(Arg::new("token").long("token"))
                        .arg(
                            Arg::new("flags")
                                .long("flags")
                                .value_parser(clap::value_parser!(u64)),
                        )
                        .arg(
                            Arg::new("port")
                                .long("port")
                                .value_parser(clap::value_parser!(i32))
                                .allow_negative_numbers(true),
                        )
                        .arg(
                            Arg::new("shell")
                                .long("shell")
                                .value_parser(clap::value_parser!(bool))
                                .default_value("true"),
                        )
                        .arg(Arg::new("tag").long("tag").action(ArgAction::Append))
                        .arg(Arg::new("key")),
                ),
            )
            .subcommand(
                Command::new("lock")
                    .arg(Arg::new("n").long("n").short('n'))
                    .arg(Arg::new("prefix"))
                    .arg(
                        Arg::new("child")
                            .num_args(0..)
                            .trailing_var_arg(true)
                            .allow_hyphen_values(true),
                    ),
            )
    }

    fn reading(args: &[&str]) -> Reading {
        let argv: Vec<String> = std::iter::once("praetor")
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        read(&argv, &tree())
    }

    fn run_args(args: &[&str]) -> Vec<String> {
        match reading(args) {
            Reading::Run { args, .. } => args[1..].to_vec(),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn refusal(args: &[&str]) -> String {
        match reading(args) {
            Reading::Refuse { message, .. } => message,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn every_syntax_go_accepts_becomes_one_form() {
        for form in [
            vec!["-recurse"],
            vec!["--recurse"],
            vec!["-recurse=true"],
            vec!["-recurse=1"],
            vec!["--recurse=T"],
            vec!["-recurse=false", "-recurse=TRUE"],
        ] {
            let mut args = vec!["kv", "get"];
            args.extend(form.iter().copied());
            assert_eq!(run_args(&args), ["kv", "get", "--recurse"], "{form:?}");
        }
        assert_eq!(run_args(&["kv", "get", "-recurse=f"]), ["kv", "get"]);
        for form in [
            vec!["-token", "x"],
            vec!["-token=x"],
            vec!["--token", "x"],
            vec!["--token=x"],
        ] {
            let mut args = vec!["kv", "get"];
            args.extend(form.iter().copied());
            assert_eq!(run_args(&args), ["kv", "get", "--token=x"], "{form:?}");
        }
        // A value flag takes the next argument whatever it looks like.
        assert_eq!(
            run_args(&["kv", "get", "-token", "-recurse"]),
            ["kv", "get", "--token=-recurse"]
        );
        assert_eq!(
            run_args(&["kv", "get", "-port", "-1", "-token="]),
            ["kv", "get", "--port=-1", "--token="]
        );
        // A boolean never takes the next argument: `false` is the key here.
        assert_eq!(
            run_args(&["kv", "get", "-recurse", "false"]),
            ["kv", "get", "--recurse", "--", "false"]
        );
        assert_eq!(
            run_args(&["kv", "get", "-shell"]),
            ["kv", "get", "--shell=true"]
        );
        assert_eq!(
            run_args(&["kv", "get", "-shell=0"]),
            ["kv", "get", "--shell=false"]
        );
    }

    #[test]
    fn flags_end_at_the_first_positional_or_at_double_dash() {
        // `-recurse` after the key is a second positional, as Go reads it.
        assert_eq!(
            refusal(&["kv", "get", "key", "-recurse"]),
            "Too many arguments (expected 1, got 2)"
        );
        assert_eq!(
            run_args(&["kv", "get", "--", "-recurse"]),
            ["kv", "get", "--", "-recurse"]
        );
        assert_eq!(run_args(&["kv", "get", "-"]), ["kv", "get", "--", "-"]);
        assert_eq!(
            run_args(&["lock", "-n", "2", "p", "ls", "-la", "--", "-n"]),
            ["lock", "--n=2", "--", "p", "ls", "-la", "--", "-n"]
        );
    }

    #[test]
    fn repeated_flags_keep_the_last_value_unless_they_collect() {
        assert_eq!(
            run_args(&["kv", "get", "-token=a", "-tag", "x", "-token=b", "-tag=y"]),
            ["kv", "get", "--tag=x", "--token=b", "--tag=y"]
        );
    }

    #[test]
    fn errors_are_gos_words() {
        assert_eq!(
            refusal(&["kv", "get", "-bogus"]),
            "flag provided but not defined: -bogus"
        );
        assert_eq!(
            refusal(&["kv", "get", "--bogus=1"]),
            "flag provided but not defined: -bogus"
        );
        assert_eq!(
            refusal(&["kv", "get", "-recurse=maybe"]),
            "invalid boolean value \"maybe\" for -recurse: parse error"
        );
        assert_eq!(
            refusal(&["kv", "get", "-token"]),
            "flag needs an argument: -token"
        );
        assert_eq!(
            refusal(&["kv", "get", "-flags=x"]),
            "invalid value \"x\" for flag -flags: parse error"
        );
        assert_eq!(
            refusal(&["kv", "get", "-flags=-1"]),
            "invalid value \"-1\" for flag -flags: parse error"
        );
        assert_eq!(
            refusal(&["kv", "get", "-port=99999999999"]),
            "invalid value \"99999999999\" for flag -port: value out of range"
        );
        assert_eq!(refusal(&["kv", "get", "---x"]), "bad flag syntax: ---x");
        assert_eq!(refusal(&["kv", "get", "-=x"]), "bad flag syntax: -=x");
        assert_eq!(
            refusal(&["kv", "nope"]),
            "Unknown subcommand of 'praetor kv': nope"
        );
        assert!(matches!(
            reading(&["nope"]),
            Reading::Refuse {
                code: UNKNOWN_COMMAND_EXIT_CODE,
                ..
            }
        ));
    }

    #[test]
    fn help_anywhere_before_double_dash_wins() {
        let kv_get = vec!["kv".to_string(), "get".to_string()];
        for args in [
            vec!["kv", "get", "-h"],
            vec!["kv", "get", "--help"],
            vec!["kv", "get", "-bogus", "-help"],
            vec!["kv", "get", "key", "-h"],
            vec!["kv", "get", "-token", "-h"],
        ] {
            assert_eq!(reading(&args), Reading::Help(kv_get.clone()), "{args:?}");
        }
        assert_eq!(
            reading(&["kv", "-h"]),
            Reading::Help(vec!["kv".to_string()])
        );
        assert_eq!(reading(&["-h"]), Reading::Help(vec![]));
        assert_eq!(
            run_args(&["kv", "get", "--", "-h"]),
            ["kv", "get", "--", "-h"]
        );
        assert_eq!(
            reading(&["kv"]),
            Reading::GroupUsage {
                path: vec!["kv".to_string()],
                code: USAGE_EXIT_CODE
            }
        );
        // A child command's own flags are its own.
        assert_eq!(
            run_args(&["lock", "p", "grep", "-h", "x"]),
            ["lock", "--", "p", "grep", "-h", "x"]
        );
        assert_eq!(
            reading(&["lock", "-h"]),
            Reading::Help(vec!["lock".to_string()])
        );
    }

    #[test]
    fn booleans_as_strconv_parses_them() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(text), Some(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(text), Some(false), "{text}");
        }
        for text in ["", "yes", "tRUE", "on", " true"] {
            assert_eq!(parse_go_bool(text), None, "{text}");
        }
    }

    #[test]
    fn integers_in_gos_notation() {
        for (text, value) in [
            ("0", 0),
            ("42", 42),
            ("+7", 7),
            ("-7", -7),
            ("0x1F", 31),
            ("0o17", 15),
            ("017", 15),
            ("0b101", 5),
            ("1_000", 1000),
            ("0x_1f", 31),
        ] {
            assert_eq!(parse_go_integer(text, true), Ok(value), "{text}");
        }
        for text in [
            "", "-", "x", "0x", "08", "1__0", "_1", "1_", "0b2", "1e3", " 1",
        ] {
            assert_eq!(
                parse_go_integer(text, true),
                Err(NumberError::Syntax),
                "{text}"
            );
        }
        assert_eq!(parse_go_integer("-1", false), Err(NumberError::Syntax));
        assert_eq!(parse_go_integer("+1", false), Err(NumberError::Syntax));
        assert_eq!(
            parse_go_integer(&"9".repeat(50), false),
            Err(NumberError::Range)
        );
        assert_eq!(
            run_args(&["kv", "get", "-flags=0x10"]),
            ["kv", "get", "--flags=16"]
        );
    }
}
