//! Typed reads of the merged configuration's JSON values, with Consul's coercions (a number
//! given as a string, a duration as Go's text or a bare number of seconds) and one error line
//! naming the key when a value has the wrong type.

use crate::proto::duration::parse_go_duration;
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::time::Duration;

pub(super) fn get_bool(map: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(Some(s == "true")),
        Some(other) => Err(format!("{key}: expected a boolean, got {other}")),
    }
}

pub(super) fn get_i64(map: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            })
            .map(Some)
            .ok_or_else(|| format!("{key}: expected an integer, got {n}")),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| format!("{key}: expected an integer, got {s:?}")),
        Some(other) => Err(format!("{key}: expected an integer, got {other}")),
    }
}

pub(super) fn get_string(map: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{key}: expected a string, got {other}")),
    }
}

pub(super) fn get_strings(map: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{key}: expected a list of strings"))
            })
            .collect(),
        Some(other) => Err(format!("{key}: expected a list of strings, got {other}")),
    }
}

pub(super) fn parse_ip(key: &str, text: &str) -> Result<IpAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{key}: {text:?} is not an IP address"))
}

pub(super) fn get_duration(
    map: &Map<String, Value>,
    key: &str,
) -> Result<Option<Duration>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => parse_go_duration(text)
            .map(Some)
            .map_err(|e| format!("{key}: {}", e.0)),
        // A bare number is seconds, as Consul's HCL decoder reads it.
        Some(Value::Number(n)) => n
            .as_u64()
            .map(|s| Some(Duration::from_secs(s)))
            .ok_or_else(|| format!("{key}: expected a duration, got {n}")),
        Some(other) => Err(format!("{key}: expected a duration, got {other}")),
    }
}

pub(super) fn get_u32(map: &Map<String, Value>, key: &str) -> Result<Option<u32>, String> {
    match get_i64(map, key)? {
        None => Ok(None),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| format!("{key}: {v} is out of range")),
    }
}
