//! Docs as tests: every walkthrough in README.md and docs/*.md runs against the built binary,
//! so what the docs say and what praetor does cannot drift apart.
//!
//! A doc's executable blocks are fenced ```` ```console ````. In them a line `$ <command>` is
//! a command, and the lines after it, up to the next `$ ` line, are its expected output
//! (standard output and standard error together, as a terminal shows them). Lines match
//! exactly, trailing whitespace aside, except that a line `...` alone matches any number of
//! lines and `[..]` inside a line matches any text. A command must exit 0 unless its expected
//! output ends with `[exit: N]`. A command ending in ` &` runs in the background and is
//! stopped by its process ID when the doc ends. A command whose line ends in `\` continues on
//! the next line, and one holding a here-document (`<<'EOF'`) takes the lines up to the
//! delimiter. Blocks of any other language are not run.
//!
//! Directives are HTML comments outside blocks, invisible to a reader:
//! - `<!-- docs-test: wait-leader 127.0.0.1:8500 -->` polls `/v1/status/leader` there (with
//!   curl, inside the doc's network) until a leader is named, at that point of the doc;
//! - `<!-- docs-test: file web.json -->` writes the next fenced block to that file in the
//!   doc's working directory, so a reader sees a plain `json` block;
//! - `<!-- docs-test: retry 30s -->` re-runs each command of the next `console` block until
//!   its output matches (for steps that converge: a check's first run, a proxy's listener);
//! - `<!-- docs-test: skip "why" -->` leaves the next `console` block unrun, for a step that
//!   truly cannot run here; the reason is required.
//!
//! An unknown directive, a `console` block whose first line is not a command, or a background
//! command with expected output is an error in the doc, not something to skip.
//!
//! Each doc runs in one `bash` inside a private network namespace (`unshare -n`, loopback
//! up), so walkthroughs use the literal `127.0.0.1:8500` a reader types without meeting any
//! other test's agents. The shell persists for the whole doc (a `cd` or `export` carries on,
//! as in a reader's terminal); its working directory is a fresh temporary one, and `praetor`
//! and a `consul` symlink to it come first on `PATH`. The invariant the runner keeps: every
//! process a doc starts belongs to the shell's process group, which the runner created and
//! kills by its ID at the end, whatever happened, within a bounded time.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long one doc may run in all, start to end.
const DOC_TIME_LIMIT: Duration = Duration::from_secs(300);
/// How long one command may run before the doc fails.
const COMMAND_TIME_LIMIT: Duration = Duration::from_secs(60);
/// How long `wait-leader` polls for a leader.
const LEADER_WAIT_LIMIT: Duration = Duration::from_secs(60);
/// The pause between two polls of a command's exit status, and between two retries.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
const RETRY_INTERVAL: Duration = Duration::from_millis(250);
/// How long a background process may take to exit after SIGTERM before it gets SIGKILL.
const STOP_TIME_LIMIT: Duration = Duration::from_secs(10);
/// Docs run at most this many at a time: each starts its own agents, and the machine is
/// shared, so running all of them at once would only make every one of them slow.
const DOCS_AT_ONCE: usize = 2;
/// How much of a background process's output a failure report shows, in lines.
const BACKGROUND_LOG_LINES: usize = 40;

/// One step of a doc, in the doc's order.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Command(CommandStep),
    WaitLeader {
        address: String,
        line: usize,
    },
    WriteFile {
        name: String,
        contents: String,
        line: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct CommandStep {
    /// The line of the doc the command starts on (1-based), for failure reports.
    line: usize,
    /// The command as the shell receives it (continuations and here-documents included).
    text: String,
    background: bool,
    expected: Vec<String>,
    exit_code: i32,
    /// Re-run until the output matches, for at most this long.
    retry: Option<Duration>,
}

/// A directive waiting for the block it applies to.
#[derive(Debug)]
enum Pending {
    File(String),
    Retry(Duration),
    Skip,
}

/// Reads a doc into its steps, or says what is malformed in it (with the line).
fn parse(doc: &str) -> Result<Vec<Step>, String> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut steps = Vec::new();
    let mut pending: Option<(Pending, usize)> = None;
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        let trimmed = line.trim();
        if let Some(directive) = directive_text(trimmed) {
            let number = index + 1;
            let (name, argument) = directive.split_once(' ').unwrap_or((directive, ""));
            let argument = argument.trim();
            match name {
                "wait-leader" if !argument.is_empty() => steps.push(Step::WaitLeader {
                    address: argument.to_string(),
                    line: number,
                }),
                "file" if !argument.is_empty() => {
                    check_file_name(argument).map_err(|e| format!("line {number}: {e}"))?;
                    set_pending(&mut pending, Pending::File(argument.to_string()), number)?;
                }
                "retry" => {
                    let limit = parse_seconds(argument)
                        .ok_or_else(|| format!("line {number}: retry needs a time like 30s"))?;
                    set_pending(&mut pending, Pending::Retry(limit), number)?;
                }
                "skip" => {
                    let reason = argument.trim_matches('"').trim();
                    if reason.is_empty() || !argument.starts_with('"') {
                        return Err(format!("line {number}: skip needs a quoted reason"));
                    }
                    set_pending(&mut pending, Pending::Skip, number)?;
                }
                _ => {
                    return Err(format!(
                        "line {number}: unknown docs-test directive `{directive}`"
                    ))
                }
            }
            index += 1;
            continue;
        }
        let Some((fence, language)) = fence_opening(line) else {
            index += 1;
            continue;
        };
        let opening = index + 1;
        let mut body = Vec::new();
        index += 1;
        while index < lines.len() && !is_fence_closing(lines[index], &fence) {
            body.push((index + 1, lines[index]));
            index += 1;
        }
        if index == lines.len() {
            return Err(format!("line {opening}: a fenced block is never closed"));
        }
        index += 1;
        match pending.take() {
            Some((Pending::File(name), _)) => {
                let mut contents: String = body.iter().map(|(_, l)| format!("{l}\n")).collect();
                if contents.is_empty() {
                    contents.push('\n');
                }
                steps.push(Step::WriteFile {
                    name,
                    contents,
                    line: opening,
                });
            }
            Some((Pending::Skip, at)) if language != "console" => {
                return Err(format!("line {at}: skip must precede a console block"));
            }
            Some((Pending::Skip, _)) => {}
            Some((Pending::Retry(limit), at)) => {
                if language != "console" {
                    return Err(format!("line {at}: retry must precede a console block"));
                }
                steps.extend(parse_console(&body, Some(limit))?);
            }
            None if language == "console" => steps.extend(parse_console(&body, None)?),
            None => {}
        }
    }
    if let Some((directive, at)) = pending {
        return Err(format!("line {at}: {directive:?} has no block after it"));
    }
    Ok(steps)
}

fn set_pending(
    pending: &mut Option<(Pending, usize)>,
    next: Pending,
    line: usize,
) -> Result<(), String> {
    if let Some((earlier, at)) = pending {
        return Err(format!(
            "line {line}: a directive follows {earlier:?} (line {at}) before its block"
        ));
    }
    *pending = Some((next, line));
    Ok(())
}

/// The text of a `<!-- docs-test: … -->` line, if the line is one.
fn directive_text(trimmed: &str) -> Option<&str> {
    let inner = trimmed.strip_prefix("<!--")?.strip_suffix("-->")?.trim();
    Some(inner.strip_prefix("docs-test:")?.trim())
}

/// A file name a doc may write: relative, inside the working directory.
fn check_file_name(name: &str) -> Result<(), String> {
    let path = Path::new(name);
    if path.is_absolute() || path.components().any(|c| c.as_os_str() == "..") {
        return Err(format!(
            "file `{name}` must stay inside the working directory"
        ));
    }
    Ok(())
}

/// `30s`, `2m` or a bare number of seconds.
fn parse_seconds(text: &str) -> Option<Duration> {
    let (number, unit) = match text.strip_suffix('m') {
        Some(number) => (number, 60),
        None => (text.strip_suffix('s').unwrap_or(text), 1),
    };
    let value: u64 = number.parse().ok()?;
    Some(Duration::from_secs(value * unit))
}

/// A fence's marker (three or more backticks or tildes) and its language, if the line opens
/// a fenced block.
fn fence_opening(line: &str) -> Option<(String, String)> {
    let trimmed = line.trim_start();
    let marker_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let marker: String = trimmed.chars().take_while(|c| *c == marker_char).collect();
    if marker.len() < 3 {
        return None;
    }
    let language = trimmed[marker.len()..]
        .split_whitespace()
        .next()
        .unwrap_or("");
    Some((marker, language.to_string()))
}

fn is_fence_closing(line: &str, fence: &str) -> bool {
    let trimmed = line.trim();
    trimmed.starts_with(fence) && trimmed.chars().all(|c| c == fence.chars().next().unwrap())
}

/// Splits a `console` block into commands and their expected output.
fn parse_console(body: &[(usize, &str)], retry: Option<Duration>) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut index = 0;
    while index < body.len() {
        let (number, line) = body[index];
        let Some(first) = line.strip_prefix("$ ") else {
            if line.trim().is_empty() {
                index += 1;
                continue;
            }
            return Err(format!(
                "line {number}: a console block line before any `$ ` command"
            ));
        };
        let mut text = first.to_string();
        index += 1;
        // A trailing backslash continues the command on the next line.
        while text.ends_with('\\') && index < body.len() {
            text.push('\n');
            text.push_str(body[index].1);
            index += 1;
        }
        // A here-document takes every line up to its delimiter.
        if let Some((delimiter, strip_tabs)) = heredoc_delimiter(&text) {
            loop {
                let Some((_, next)) = body.get(index) else {
                    return Err(format!(
                        "line {number}: here-document never ends with {delimiter}"
                    ));
                };
                text.push('\n');
                text.push_str(next);
                index += 1;
                let candidate = if strip_tabs {
                    next.trim_start_matches('\t')
                } else {
                    next
                };
                if candidate == delimiter {
                    break;
                }
            }
        }
        let mut expected = Vec::new();
        while index < body.len() && !body[index].1.starts_with("$ ") {
            expected.push(body[index].1.trim_end().to_string());
            index += 1;
        }
        while expected.last().is_some_and(|l| l.is_empty()) {
            expected.pop();
        }
        let mut exit_code = 0;
        if let Some(last) = expected.last() {
            if let Some(code) = last
                .strip_prefix("[exit: ")
                .and_then(|r| r.strip_suffix(']'))
            {
                exit_code = code
                    .parse()
                    .map_err(|_| format!("line {number}: bad exit code `{last}`"))?;
                expected.pop();
            }
        }
        let background = text.trim_end().ends_with(" &");
        if background {
            if !expected.is_empty() || exit_code != 0 {
                return Err(format!(
                    "line {number}: a background command has no output to expect"
                ));
            }
            let trimmed = text.trim_end();
            text = trimmed[..trimmed.len() - 2].trim_end().to_string();
        }
        steps.push(Step::Command(CommandStep {
            line: number,
            text,
            background,
            expected,
            exit_code,
            retry,
        }));
    }
    Ok(steps)
}

/// The delimiter of a here-document in a command (`<<EOF`, `<<'EOF'`, `<<-"EOF"`) and whether
/// leading tabs are stripped (`<<-`).
fn heredoc_delimiter(command: &str) -> Option<(String, bool)> {
    let at = command.find("<<")?;
    let mut rest = &command[at + 2..];
    if rest.starts_with('<') {
        return None; // a here-string, `<<<`, has no body
    }
    let strip_tabs = rest.starts_with('-');
    if strip_tabs {
        rest = &rest[1..];
    }
    let rest = rest.trim_start();
    let word: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ';' && *c != '|' && *c != '>')
        .collect();
    let word = word.trim_matches(|c| c == '\'' || c == '"').to_string();
    (!word.is_empty()).then_some((word, strip_tabs))
}

/// Whether the actual output matches the expected lines (`...` and `[..]` as wildcards).
fn output_matches(expected: &[String], actual: &str) -> bool {
    let mut actual: Vec<&str> = actual.lines().map(str::trim_end).collect();
    while actual.last().is_some_and(|l| l.is_empty()) {
        actual.pop();
    }
    // matches[i][j]: expected[i..] matches actual[j..].
    let mut matches = vec![vec![false; actual.len() + 1]; expected.len() + 1];
    matches[expected.len()][actual.len()] = true;
    for i in (0..expected.len()).rev() {
        for j in (0..=actual.len()).rev() {
            matches[i][j] = if expected[i] == "..." {
                matches[i + 1][j] || (j < actual.len() && matches[i][j + 1])
            } else {
                j < actual.len() && line_matches(&expected[i], actual[j]) && matches[i + 1][j + 1]
            };
        }
    }
    matches[0][0]
}

/// One expected line against one actual line, with `[..]` matching any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// A doc's shell in its private network namespace, and what it started.
struct Session {
    doc: String,
    shell: Child,
    /// The shell's process ID, also the ID of the process group everything joins.
    group: i32,
    work: PathBuf,
    control: PathBuf,
    root: PathBuf,
    next_command: usize,
    background: Vec<Background>,
    deadline: Instant,
}

struct Background {
    pid: i32,
    line: usize,
    text: String,
    output: PathBuf,
}

/// What one command did.
struct Outcome {
    exit_code: i32,
    output: String,
}

impl Session {
    fn start(doc: &str) -> Session {
        let root = std::env::temp_dir().join(format!(
            "praetor-docs-{}-{}",
            doc.replace(['/', '.'], "-"),
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&root);
        let (work, control, bin) = (root.join("work"), root.join("control"), root.join("bin"));
        for dir in [&work, &control, &bin] {
            fs::create_dir_all(dir).unwrap();
        }
        let binary = PathBuf::from(env!("CARGO_BIN_EXE_praetor"));
        std::os::unix::fs::symlink(&binary, bin.join("praetor")).unwrap();
        std::os::unix::fs::symlink(&binary, bin.join("consul")).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // Root may make a network namespace directly; anyone else makes a user namespace to
        // hold it (Debian allows that by default), mapped to root inside.
        let namespace_flags = if unsafe { libc::getuid() } == 0 {
            "-n"
        } else {
            "-rn"
        };
        let mut command = Command::new("unshare");
        command
            .args([namespace_flags, "--", "bash", "--noprofile", "--norc"])
            .env_clear()
            .env("PATH", path)
            .env("HOME", &work)
            .env("LANG", "C.UTF-8")
            .env("TERM", "dumb")
            .current_dir(&work)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(
                fs::File::create(control.join("shell.log")).unwrap(),
            ))
            .stderr(Stdio::from(
                fs::File::create(control.join("shell.err")).unwrap(),
            ));
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let shell = command
            .spawn()
            .expect("unshare (util-linux) must be installed");
        let group = shell.id() as i32;
        let mut session = Session {
            doc: doc.to_string(),
            shell,
            group,
            work,
            control,
            root,
            next_command: 0,
            background: Vec::new(),
            deadline: Instant::now() + DOC_TIME_LIMIT,
        };
        let up = session.run("ip link set lo up", COMMAND_TIME_LIMIT);
        assert!(
            up.exit_code == 0,
            "{doc}: could not bring up loopback in a private network namespace \
             (unshare {namespace_flags} needs root or user namespaces): {}{}",
            up.output,
            fs::read_to_string(session.control.join("shell.err")).unwrap_or_default()
        );
        session
    }

    /// Hands one command to the shell. Its output goes to `<n>.out`; once it has exited (in
    /// the background: once it has started) `<n>.status` (`$?`) or `<n>.pid` (`$!`) appears,
    /// whole: written, then renamed. Standard input is /dev/null so that a command cannot
    /// read the runner's script.
    fn submit(&mut self, text: &str, background: bool) -> (PathBuf, PathBuf) {
        let number = self.next_command;
        self.next_command += 1;
        let (ampersand, variable, suffix) = match background {
            true => (" &", "$!", "pid"),
            false => ("", "$?", "status"),
        };
        let output = self.control.join(format!("{number}.out"));
        let result = self.control.join(format!("{number}.{suffix}"));
        let script = format!(
            "{{ {text}{ampersand}\n}} >{out} 2>&1 </dev/null\necho {variable} >{result}.tmp && mv {result}.tmp {result}\n",
            out = output.display(),
            result = result.display(),
        );
        self.send(&script);
        (output, result)
    }

    /// The contents of a result file once it appears, or `None` past the limit.
    fn await_result(&self, result: &Path, limit: Duration) -> Option<String> {
        let deadline = (Instant::now() + limit).min(self.deadline);
        loop {
            if let Ok(text) = fs::read_to_string(result) {
                return Some(text);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Runs one foreground command in the shell and waits for it, bounded.
    fn run(&mut self, text: &str, limit: Duration) -> Outcome {
        let (output, status) = self.submit(text, false);
        let Some(code) = self.await_result(&status, limit) else {
            let partial = fs::read_to_string(&output).unwrap_or_default();
            self.fail(&format!(
                "`{text}` did not finish within {} s; its output so far:\n{partial}",
                limit.as_secs()
            ));
        };
        Outcome {
            exit_code: code.trim().parse().unwrap_or(-1),
            output: fs::read_to_string(&output).unwrap_or_default(),
        }
    }

    /// Starts a background command; its output goes to a file shown if the doc fails.
    fn spawn(&mut self, step: &CommandStep) {
        let (output, pid_file) = self.submit(&step.text, true);
        let Some(pid) = self.await_result(&pid_file, COMMAND_TIME_LIMIT) else {
            self.fail(&format!("`{}` did not start", step.text));
        };
        self.background.push(Background {
            pid: pid.trim().parse().expect("bash prints $! as a number"),
            line: step.line,
            text: step.text.clone(),
            output,
        });
    }

    fn send(&mut self, script: &str) {
        let stdin = self
            .shell
            .stdin
            .as_mut()
            .expect("the shell's input is a pipe");
        if let Err(e) = stdin
            .write_all(script.as_bytes())
            .and_then(|_| stdin.flush())
        {
            let log = fs::read_to_string(self.control.join("shell.err")).unwrap_or_default();
            panic!("{}: the doc's shell is gone ({e}): {log}", self.doc);
        }
    }

    fn command(&mut self, step: &CommandStep) {
        if step.background {
            return self.spawn(step);
        }
        let retry_until = step
            .retry
            .map(|limit| (Instant::now() + limit).min(self.deadline));
        loop {
            let outcome = self.run(&step.text, COMMAND_TIME_LIMIT);
            let good = outcome.exit_code == step.exit_code
                && output_matches(&step.expected, &outcome.output);
            if good {
                return;
            }
            if retry_until.is_some_and(|until| Instant::now() < until) {
                std::thread::sleep(RETRY_INTERVAL);
                continue;
            }
            let retried = match step.retry {
                Some(limit) => format!(" (retried for {} s)", limit.as_secs()),
                None => String::new(),
            };
            self.fail(&format!(
                "line {}: `{}`{retried}\n--- expected (exit {}):\n{}\n--- actual (exit {}):\n{}",
                step.line,
                step.text,
                step.exit_code,
                step.expected.join("\n"),
                outcome.exit_code,
                outcome.output.trim_end(),
            ));
        }
    }

    fn wait_leader(&mut self, address: &str, line: usize) {
        let deadline = (Instant::now() + LEADER_WAIT_LIMIT).min(self.deadline);
        let probe = format!("curl -s -m 2 http://{address}/v1/status/leader");
        loop {
            let outcome = self.run(&probe, COMMAND_TIME_LIMIT);
            let leader = outcome.output.trim();
            if outcome.exit_code == 0 && !leader.is_empty() && leader != "\"\"" {
                return;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "line {line}: no leader at {address} within {} s (last answer: {leader:?})",
                    LEADER_WAIT_LIMIT.as_secs()
                ));
            }
            std::thread::sleep(RETRY_INTERVAL);
        }
    }

    fn write_file(&self, name: &str, contents: &str) {
        let path = self.work.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(path, contents).unwrap();
    }

    /// Fails the doc's test, with what every background process printed.
    fn fail(&self, message: &str) -> ! {
        let mut report = format!(
            "{}: {message}\n(the doc's files are kept in {})\n",
            self.doc,
            self.work.display()
        );
        for process in &self.background {
            let log = fs::read_to_string(&process.output).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(BACKGROUND_LOG_LINES)..];
            report.push_str(&format!(
                "--- background `{}` (line {}), last {} lines:\n{}\n",
                process.text,
                process.line,
                tail.len(),
                tail.join("\n")
            ));
        }
        panic!("{report}");
    }

    /// Stops every background process (SIGTERM, then SIGKILL when one lingers), ends the
    /// shell and kills whatever is left in its process group.
    fn stop(&mut self) {
        // A background command that already finished is not signalled: its process ID may
        // have been given to another process since.
        for process in self.background.iter().rev() {
            if running(process.pid) {
                unsafe { libc::kill(process.pid, libc::SIGTERM) };
            }
        }
        let deadline = Instant::now() + STOP_TIME_LIMIT;
        while Instant::now() < deadline && self.background.iter().any(|p| running(p.pid)) {
            std::thread::sleep(POLL_INTERVAL);
        }
        for process in &self.background {
            if running(process.pid) {
                unsafe { libc::kill(process.pid, libc::SIGKILL) };
            }
        }
        drop(self.shell.stdin.take());
        let deadline = Instant::now() + STOP_TIME_LIMIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.shell.try_wait() {
                break;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        // Whatever a command left behind (a process it put in the background itself) is in
        // the shell's process group.
        unsafe { libc::kill(-self.group, libc::SIGKILL) };
        let _ = self.shell.kill();
        let _ = self.shell.wait();
    }
}

/// Whether a process runs (a zombie waiting for the shell to reap it does not).
fn running(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop();
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

/// Limits how many docs run at once.
static RUNNING: Mutex<usize> = Mutex::new(0);
static SLOT_FREED: Condvar = Condvar::new();

struct Slot;

impl Slot {
    fn take() -> Slot {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        while *running >= DOCS_AT_ONCE {
            running = SLOT_FREED.wait(running).unwrap_or_else(|e| e.into_inner());
        }
        *running += 1;
        Slot
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *RUNNING.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        SLOT_FREED.notify_one();
    }
}

/// Runs every step of one doc (a path from the repository's root).
fn run_doc(doc: &str) {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc))
        .unwrap_or_else(|e| panic!("{doc}: {e}"));
    let steps = parse(&text).unwrap_or_else(|e| panic!("{doc}: {e}"));
    if doc == "README.md" {
        assert!(
            steps.iter().any(|s| matches!(s, Step::Command(_))),
            "README.md must have a console walkthrough (the quick start)"
        );
    }
    if steps.is_empty() {
        return;
    }
    let _slot = Slot::take();
    let mut session = Session::start(doc);
    for step in &steps {
        match step {
            Step::Command(command) => session.command(command),
            Step::WaitLeader { address, line } => session.wait_leader(address, *line),
            Step::WriteFile { name, contents, .. } => session.write_file(name, contents),
        }
    }
}

macro_rules! doc_tests {
    ($($name:ident => $path:literal,)*) => {
        $(#[test] fn $name() { run_doc($path); })*
        /// Every doc the tests above run.
        const DOCS: &[&str] = &[$($path),*];
    };
}

doc_tests! {
    readme => "README.md",
    acl => "docs/acl.md",
    benchmarks => "docs/benchmarks.md",
    catalog => "docs/catalog.md",
    cli => "docs/cli.md",
    config => "docs/config.md",
    configuration => "docs/configuration.md",
    connect => "docs/connect.md",
    decisions => "docs/decisions.md",
    dns => "docs/dns.md",
    federation => "docs/federation.md",
    fuzzing => "docs/fuzzing.md",
    gateways => "docs/gateways.md",
    gossip => "docs/gossip.md",
    http_api => "docs/http-api.md",
    memory => "docs/memory.md",
    operations => "docs/operations.md",
    peering => "docs/peering.md",
    rpc => "docs/rpc.md",
    sessions => "docs/sessions.md",
    tls => "docs/tls.md",
    ui => "docs/ui.md",
    xds => "docs/xds.md",
}

/// A doc added to docs/ without a test here would never run: this names it.
#[test]
fn every_doc_has_a_test() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut missing = Vec::new();
    for entry in fs::read_dir(docs).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let path = format!("docs/{name}");
        if name.ends_with(".md") && !DOCS.contains(&path.as_str()) {
            missing.push(path);
        }
    }
    assert!(
        missing.is_empty(),
        "docs without a test in tests/it/docs.rs: {missing:?}"
    );
}

#[test]
fn wildcards_match_as_documented() {
    let lines = |text: &str| text.lines().map(String::from).collect::<Vec<_>>();
    assert!(output_matches(&lines("a\nb"), "a\nb\n"));
    assert!(
        output_matches(&lines("a\nb"), "a  \nb\n\n"),
        "trailing whitespace is ignored"
    );
    assert!(!output_matches(&lines("a\nb"), "a\nb\nc"));
    assert!(!output_matches(&lines("a"), "a\nb"));
    assert!(output_matches(&lines("a\n...\nd"), "a\nb\nc\nd"));
    assert!(
        output_matches(&lines("a\n...\nd"), "a\nd"),
        "`...` matches no lines too"
    );
    assert!(!output_matches(&lines("a\n...\nd"), "a\nb\nc"));
    assert!(output_matches(&lines("..."), ""));
    assert!(output_matches(&lines(""), ""));
    assert!(output_matches(&lines("id [..] at [..]."), "id 42 at noon."));
    assert!(output_matches(&lines("[..]"), "anything"));
    assert!(!output_matches(&lines("id [..]!"), "id 42."));
    assert!(
        !output_matches(&lines("ab[..]ba"), "aba"),
        "the two ends may not overlap"
    );
    assert!(output_matches(&lines("x[..]y[..]z"), "x1y2y3z"));
}

#[test]
fn console_blocks_parse_into_commands() {
    let doc = "intro\n\
        <!-- docs-test: file web.json -->\n\
        ```json\n{\"Name\": \"web\"}\n```\n\
        <!-- docs-test: wait-leader 127.0.0.1:8500 -->\n\
        ```console\n\
        $ praetor agent -dev &\n\
        $ praetor kv get missing\n\
        Error! No key exists at: missing\n\
        [exit: 1]\n\
        $ cat > a.txt <<'EOF'\n\
        $ not a command\n\
        EOF\n\
        $ echo one \\\n\
        two\n\
        one two\n\
        ```\n\
        <!-- docs-test: skip \"needs a second machine\" -->\n\
        ```console\n$ false\n```\n\
        ```sh\n$ false\n```\n";
    let steps = parse(doc).unwrap();
    assert_eq!(steps.len(), 6, "{steps:#?}");
    assert!(matches!(&steps[0], Step::WriteFile { name, contents, .. }
        if name == "web.json" && contents == "{\"Name\": \"web\"}\n"));
    assert!(matches!(&steps[1], Step::WaitLeader { address, .. } if address == "127.0.0.1:8500"));
    let Step::Command(agent) = &steps[2] else {
        panic!()
    };
    assert!(agent.background && agent.text == "praetor agent -dev");
    let Step::Command(get) = &steps[3] else {
        panic!()
    };
    assert_eq!((get.exit_code, get.expected.len()), (1, 1));
    let Step::Command(heredoc) = &steps[4] else {
        panic!()
    };
    assert_eq!(heredoc.text, "cat > a.txt <<'EOF'\n$ not a command\nEOF");
    assert!(heredoc.expected.is_empty());
    let Step::Command(continued) = &steps[5] else {
        panic!()
    };
    assert_eq!(continued.text, "echo one \\\ntwo");
    assert_eq!(continued.expected, vec!["one two"]);
}

#[test]
fn malformed_docs_are_refused() {
    for (doc, complaint) in [
        (
            "<!-- docs-test: wait-for-it -->\n",
            "unknown docs-test directive",
        ),
        (
            "<!-- docs-test: skip -->\n```console\n$ true\n```\n",
            "quoted reason",
        ),
        ("<!-- docs-test: file a.json -->\n", "no block after it"),
        (
            "<!-- docs-test: file ../a.json -->\n```json\n{}\n```\n",
            "inside the working",
        ),
        (
            "```console\noutput first\n$ true\n```\n",
            "before any `$ ` command",
        ),
        (
            "```console\n$ sleep 1 &\nhello\n```\n",
            "background command",
        ),
        ("```console\n$ true\n", "never closed"),
    ] {
        let error = parse(doc).expect_err(doc);
        assert!(error.contains(complaint), "{doc:?}: {error}");
    }
}

/// docs/http-api.md lists every public path of the routing table, so an endpoint cannot be
/// added without a line that tells a reader it exists. Public paths are the string literals
/// in `route(Exact("…"))` and `route(Prefix("…"))`; the internal ones are named constants.
#[test]
fn every_route_is_in_the_http_api_doc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let routes = fs::read_to_string(root.join("src/api/routes.rs")).unwrap();
    let doc = fs::read_to_string(root.join("docs/http-api.md")).unwrap();
    let mut missing = Vec::new();
    let mut seen = 0;
    for line in routes.lines() {
        let Some(rest) = line.trim_start().strip_prefix("route(") else {
            continue;
        };
        let Some(path) = ["Exact(\"", "Prefix(\""]
            .iter()
            .find_map(|kind| rest.strip_prefix(kind))
            .and_then(|quoted| quoted.split('"').next())
        else {
            continue;
        };
        seen += 1;
        // A prefix route is documented with its parameter (`/v1/kv/<key>`): the prefix
        // without its trailing slash must appear, followed by `/` or the end of the code span.
        let stem = path.trim_end_matches('/');
        let listed = doc.match_indices(stem).any(|(at, _)| {
            let after = doc[at + stem.len()..].chars().next();
            matches!(after, Some('/' | '`' | ' ' | ','))
        });
        if !listed {
            missing.push(path);
        }
    }
    assert!(
        seen > 100,
        "found only {seen} routes: has routes.rs changed shape?"
    );
    assert!(
        missing.is_empty(),
        "routes missing from docs/http-api.md: {missing:?}"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside fenced blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fence: Option<String> = None;
    let mut found = Vec::new();
    for line in text.lines() {
        match &fence {
            Some(open) if is_fence_closing(line, open) => fence = None,
            Some(_) => {}
            None => {
                if let Some((marker, _)) = fence_opening(line) {
                    fence = Some(marker);
                } else if line.starts_with('#') {
                    found.push(heading_anchor(line.trim_start_matches('#')));
                }
            }
        }
    }
    found
}

/// Every relative link in README.md and docs/*.md names a file that exists and, with a
/// `#fragment`, a heading of that file: moving a section cannot leave a link dangling.
#[test]
fn links_between_docs_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    for doc in DOCS {
        let path = root.join(doc);
        let text = fs::read_to_string(&path).unwrap();
        let base = path.parent().unwrap();
        for (at, _) in text.match_indices("](") {
            let rest = &text[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = &rest[..end];
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let file_path = if file.is_empty() {
                path.clone()
            } else {
                base.join(file)
            };
            if !file_path.exists() {
                broken.push(format!("{doc}: {target} (no such file)"));
                continue;
            }
            if !fragment.is_empty() && file_path.extension().is_some_and(|e| e == "md") {
                let linked = fs::read_to_string(&file_path).unwrap();
                if !anchors(&linked).iter().any(|a| a == fragment) {
                    broken.push(format!("{doc}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// `bench/churn_floor.sh` (described in docs/benchmarks.md) builds praetor with its floor
/// patch applied: the patch must apply to the tree as it is, or the churn figure cannot be
/// measured at all (it went stale once when the catalog path became typed calls).
#[test]
fn the_churn_floor_patch_applies_to_the_tree() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = std::process::Command::new("git")
        .current_dir(root)
        .args([
            "apply",
            "--check",
            "bench/floors/catalog-writes-as-kv.patch",
        ])
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "bench/floors/catalog-writes-as-kv.patch no longer applies: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
