//! Every command's usage text, written from the flags the command declares, in the layout of
//! Consul's CLI: a `Usage:` line, the command's description, then its flags in two groups —
//! "HTTP API Options" (the flags every command that speaks to an agent shares) and
//! "Command Options" — each flag on its own line with the one-line description under it.
//! A group of commands lists its subcommands instead, and `praetor -h` lists the commands.
//!
//! Invariant: the text comes from the same declaration [`super::goflag`] reads, so a flag
//! that parses is a flag that is documented; a test walks every command and refuses a flag
//! without a description.

use super::goflag::{declared_flags, flag_name, full_name, FlagKind};
use clap::builder::ArgAction;
use clap::Args;

/// Width Consul's CLI wraps its usage text at.
const LINE_WIDTH_MAX: usize = 72;
/// Indentation of a flag's description under the flag.
const FLAG_TEXT_INDENT: usize = 5;
/// Indentation of a command's description.
const DESCRIPTION_INDENT: usize = 2;

/// The usage of the command at `path` under `root`.
pub fn render(root: &clap::Command, path: &[String]) -> String {
    let mut command = root;
    for name in path {
        match command.find_subcommand(name) {
            Some(sub) => command = sub,
            None => break,
        }
    }
    if path.is_empty() {
        return render_root(root);
    }
    let name = full_name(path);
    let mut out = String::new();
    if command.has_subcommands() {
        out.push_str(&format!("Usage: {name} <subcommand> [options] [args]\n\n"));
        push_description(&mut out, command);
        out.push_str("Subcommands:\n");
        push_command_list(&mut out, command);
        return out;
    }
    out.push_str(&format!("Usage: {name}"));
    if declared_flags(command).next().is_some() {
        out.push_str(" [options]");
    }
    for arg in command.get_positionals().filter(|a| !a.is_hide_set()) {
        out.push(' ');
        out.push_str(&positional_synopsis(arg));
    }
    out.push_str("\n\n");
    push_description(&mut out, command);
    let http_ids: Vec<clap::Id> = super::HttpFlags::augment_args(clap::Command::new("http"))
        .get_arguments()
        .map(|a| a.get_id().clone())
        .collect();
    let mut flags: Vec<&clap::Arg> = declared_flags(command)
        .filter(|a| !a.is_hide_set())
        .collect();
    // Go's flag sets list their flags by name.
    flags.sort_by_key(|a| flag_name(a));
    // The shared HTTP flags come as a set; a command with a flag of the same name that does
    // not take the set (the agent's own -datacenter) lists it among its own.
    let takes_http_flags = http_ids
        .iter()
        .all(|id| flags.iter().any(|a| a.get_id() == id));
    let (http, own): (Vec<&clap::Arg>, Vec<&clap::Arg>) = flags
        .into_iter()
        .partition(|a| takes_http_flags && http_ids.contains(a.get_id()));
    for (title, group) in [("HTTP API Options", http), ("Command Options", own)] {
        if group.is_empty() {
            continue;
        }
        out.push_str(title);
        out.push_str("\n\n");
        for arg in group {
            push_flag(&mut out, arg);
        }
    }
    // One newline ends the text, as Consul's trimmed usage plus its output's newline.
    let end = out.trim_end_matches('\n').len();
    out.truncate(end);
    out.push('\n');
    out
}

/// `praetor -h`: the commands, as Consul's dispatcher lists them.
fn render_root(root: &clap::Command) -> String {
    let mut out = String::from("Usage: praetor [--version] [--help] <command> [<args>]\n\n");
    out.push_str("Available commands are:\n");
    push_command_list(&mut out, root);
    out
}

/// The subcommands of `command` by name, one a line, names aligned, each with its one-line
/// summary.
fn push_command_list(out: &mut String, command: &clap::Command) {
    let mut subcommands: Vec<&clap::Command> = command
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .collect();
    subcommands.sort_by_key(|c| c.get_name());
    let width = subcommands
        .iter()
        .map(|c| c.get_name().len())
        .max()
        .unwrap_or(0);
    for sub in subcommands {
        let summary = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        out.push_str(&format!(
            "    {:<width$}    {}\n",
            sub.get_name(),
            summary.trim_end_matches('.')
        ));
    }
}

fn push_description(out: &mut String, command: &clap::Command) {
    let text = command
        .get_long_about()
        .or_else(|| command.get_about())
        .map(|t| t.to_string())
        .unwrap_or_default();
    for paragraph in text.split("\n\n") {
        out.push_str(&wrap(&sentence(paragraph), DESCRIPTION_INDENT));
        out.push_str("\n\n");
    }
}

/// `KEY`, `[KEY]` or `[FILE...]`, as the argument is required and repeats.
fn positional_synopsis(arg: &clap::Arg) -> String {
    let name = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(|n| n.to_string())
        .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
    let repeats = matches!(arg.get_action(), ArgAction::Append)
        || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    let name = if repeats { format!("{name}...") } else { name };
    if arg.is_required_set() {
        name
    } else {
        format!("[{name}]")
    }
}

/// One flag: `  -name=<type>` (or `  -name` for a boolean), then its description.
fn push_flag(out: &mut String, arg: &clap::Arg) {
    let kind = FlagKind::of(arg);
    let placeholder = match kind {
        FlagKind::Switch | FlagKind::Boolean => None,
        FlagKind::Integer { min, .. } if min < 0 => Some("int"),
        FlagKind::Integer { .. } => Some("uint"),
        FlagKind::Duration => Some("duration"),
        FlagKind::Text if matches!(arg.get_action(), ArgAction::Append) => Some("value"),
        FlagKind::Text => Some("string"),
    };
    match placeholder {
        Some(placeholder) => out.push_str(&format!("  -{}=<{placeholder}>\n", flag_name(arg))),
        None => out.push_str(&format!("  -{}\n", flag_name(arg))),
    }
    let mut text = sentence(&arg.get_help().map(|h| h.to_string()).unwrap_or_default());
    let default: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let shows_default = kind != FlagKind::Switch
        && !default.is_empty()
        && default.iter().all(|v| !v.is_empty() && v != "false")
        && !text.contains("default");
    if shows_default {
        text.push_str(&format!(" The default is {}.", default.join(",")));
    }
    out.push_str(&wrap(&text, FLAG_TEXT_INDENT));
    out.push_str("\n\n");
}

/// The text as a sentence: clap drops a one-sentence doc comment's final period.
fn sentence(text: &str) -> String {
    let text = text.trim();
    if text.is_empty() || text.ends_with(['.', '!', '?', ':']) {
        return text.to_string();
    }
    format!("{text}.")
}

/// `text` wrapped at [`LINE_WIDTH_MAX`] with `indent` spaces before every line.
fn wrap(text: &str, indent: usize) -> String {
    let width = LINE_WIDTH_MAX - indent;
    let pad = " ".repeat(indent);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(format!("{pad}{line}"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(format!("{pad}{line}"));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_at_consuls_width() {
        let text = "word ".repeat(40);
        for line in wrap(&text, FLAG_TEXT_INDENT).lines() {
            assert!(line.len() <= LINE_WIDTH_MAX, "{line:?}");
            assert!(line.starts_with("     word"), "{line:?}");
        }
        assert_eq!(wrap("", 2), "");
    }
}
