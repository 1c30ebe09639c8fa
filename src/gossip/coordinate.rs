//! Vivaldi network coordinates exactly as serf's `coordinate` package computes them:
//! 8 dimensions plus a height, an error estimate, an adjustment term averaged over a
//! window of samples, a median latency filter of 3 samples per node, and gravity
//! towards the origin. Randomness (for separating coincident coordinates) comes from
//! the caller's RNG.

use std::collections::HashMap;
use std::time::Duration;

use rand::{Rng, RngExt};

pub use crate::proto::gossip::serf::Coordinate;

/// serf `coordinate.Config`.
#[derive(Debug, Clone)]
pub struct VivaldiConfig {
    pub dimensionality: usize,
    pub error_max: f64,
    pub ce: f64,
    pub cc: f64,
    pub adjustment_window_size: usize,
    pub height_min: f64,
    pub latency_filter_size: usize,
    pub gravity_rho: f64,
}

impl Default for VivaldiConfig {
    fn default() -> Self {
        VivaldiConfig {
            dimensionality: 8,
            error_max: 1.5,
            ce: 0.25,
            cc: 0.25,
            adjustment_window_size: 20,
            height_min: 10.0e-6,
            latency_filter_size: 3,
            gravity_rho: 150.0,
        }
    }
}

const ZERO_THRESHOLD: f64 = 1.0e-6;
/// serf rejects RTTs outside (0, 10 s].
const RTT_MAX: Duration = Duration::from_secs(10);

pub fn new_coordinate(c: &VivaldiConfig) -> Coordinate {
    Coordinate {
        vec: vec![0.0; c.dimensionality],
        error: c.error_max,
        adjustment: 0.0,
        height: c.height_min,
    }
}

fn is_valid(c: &Coordinate) -> bool {
    c.vec.iter().all(|x| x.is_finite())
        && c.error.is_finite()
        && c.adjustment.is_finite()
        && c.height.is_finite()
}

fn magnitude(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

fn raw_distance(a: &Coordinate, b: &Coordinate) -> f64 {
    let d: Vec<f64> = a.vec.iter().zip(&b.vec).map(|(x, y)| x - y).collect();
    magnitude(&d) + a.height + b.height
}

/// serf `Coordinate.DistanceTo`, in seconds.
pub fn distance_seconds(a: &Coordinate, b: &Coordinate) -> f64 {
    let dist = raw_distance(a, b);
    let adjusted = dist + a.adjustment + b.adjustment;
    if adjusted > 0.0 {
        adjusted
    } else {
        dist
    }
}

fn unit_vector_at(a: &[f64], b: &[f64], rng: &mut impl Rng) -> (Vec<f64>, f64) {
    let mut ret: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let mag = magnitude(&ret);
    if mag > ZERO_THRESHOLD {
        return (ret.iter().map(|x| x / mag).collect(), mag);
    }
    for x in ret.iter_mut() {
        *x = rng.random::<f64>() - 0.5;
    }
    let mag = magnitude(&ret);
    if mag > ZERO_THRESHOLD {
        return (ret.iter().map(|x| x / mag).collect(), 0.0);
    }
    let mut ret = vec![0.0; a.len()];
    if let Some(first) = ret.first_mut() {
        *first = 1.0;
    }
    (ret, 0.0)
}

fn apply_force(
    c: &VivaldiConfig,
    me: &Coordinate,
    force: f64,
    other: &Coordinate,
    rng: &mut impl Rng,
) -> Coordinate {
    let (unit, mag) = unit_vector_at(&me.vec, &other.vec, rng);
    let mut ret = me.clone();
    for (x, u) in ret.vec.iter_mut().zip(&unit) {
        *x += u * force;
    }
    if mag > ZERO_THRESHOLD {
        ret.height = (ret.height + other.height) * force / mag + ret.height;
        ret.height = ret.height.max(c.height_min);
    }
    ret
}

/// serf `coordinate.Client`.
#[derive(Debug, Clone)]
pub struct VivaldiClient {
    config: VivaldiConfig,
    coord: Coordinate,
    origin: Coordinate,
    adjustment_index: usize,
    adjustment_samples: Vec<f64>,
    latency_samples: HashMap<String, Vec<f64>>,
    pub resets: u64,
}

impl VivaldiClient {
    pub fn new(config: VivaldiConfig) -> Self {
        VivaldiClient {
            coord: new_coordinate(&config),
            origin: new_coordinate(&config),
            adjustment_samples: vec![0.0; config.adjustment_window_size],
            adjustment_index: 0,
            latency_samples: HashMap::new(),
            resets: 0,
            config,
        }
    }

    pub fn coordinate(&self) -> &Coordinate {
        &self.coord
    }

    pub fn forget(&mut self, node: &str) {
        self.latency_samples.remove(node);
    }

    /// serf `Client.Update`: fold in one RTT sample to `node` at `other`.
    pub fn update(
        &mut self,
        node: &str,
        other: &Coordinate,
        rtt: Duration,
        rng: &mut impl Rng,
    ) -> Result<(), &'static str> {
        if other.vec.len() != self.coord.vec.len() {
            return Err("dimensions aren't compatible");
        }
        if !is_valid(other) {
            return Err("coordinate is invalid");
        }
        if rtt > RTT_MAX {
            return Err("round trip time not in valid range");
        }
        let samples = self.latency_samples.entry(node.to_owned()).or_default();
        samples.push(rtt.as_secs_f64());
        if samples.len() > self.config.latency_filter_size {
            samples.remove(0);
        }
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        let rtt_seconds = sorted[sorted.len() / 2];

        // Vivaldi step.
        let dist = distance_seconds(&self.coord, other);
        let rtt_s = rtt_seconds.max(ZERO_THRESHOLD);
        let wrongness = (dist - rtt_s).abs() / rtt_s;
        let total_error = (self.coord.error + other.error).max(ZERO_THRESHOLD);
        let weight = self.coord.error / total_error;
        self.coord.error = self.config.ce * weight * wrongness
            + self.coord.error * (1.0 - self.config.ce * weight);
        if self.coord.error > self.config.error_max {
            self.coord.error = self.config.error_max;
        }
        let force = self.config.cc * weight * (rtt_s - dist);
        self.coord = apply_force(&self.config, &self.coord, force, other, rng);

        // Adjustment (uses the unclamped filtered RTT, as serf does).
        if self.config.adjustment_window_size > 0 {
            let dist = raw_distance(&self.coord, other);
            self.adjustment_samples[self.adjustment_index] = rtt_seconds - dist;
            self.adjustment_index =
                (self.adjustment_index + 1) % self.config.adjustment_window_size;
            let sum: f64 = self.adjustment_samples.iter().sum();
            self.coord.adjustment = sum / (2.0 * self.config.adjustment_window_size as f64);
        }

        // Gravity.
        let dist = distance_seconds(&self.origin, &self.coord);
        let force = -(dist / self.config.gravity_rho).powi(2);
        self.coord = apply_force(&self.config, &self.coord, force, &self.origin.clone(), rng);

        if !is_valid(&self.coord) {
            self.resets += 1;
            self.coord = new_coordinate(&self.config);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn two_nodes_converge_to_their_rtt() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut a = VivaldiClient::new(VivaldiConfig::default());
        let mut b = VivaldiClient::new(VivaldiConfig::default());
        let rtt = Duration::from_millis(10);
        for _ in 0..200 {
            let cb = b.coordinate().clone();
            a.update("b", &cb, rtt, &mut rng).unwrap();
            let ca = a.coordinate().clone();
            b.update("a", &ca, rtt, &mut rng).unwrap();
        }
        let est = distance_seconds(a.coordinate(), b.coordinate());
        assert!((est - 0.010).abs() < 0.002, "estimated {est}");
    }

    #[test]
    fn rejects_bad_input() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut a = VivaldiClient::new(VivaldiConfig::default());
        let mut bad = new_coordinate(&VivaldiConfig::default());
        bad.vec[0] = f64::NAN;
        assert!(a
            .update("x", &bad, Duration::from_millis(1), &mut rng)
            .is_err());
        bad.vec.pop();
        assert!(a
            .update("x", &bad, Duration::from_millis(1), &mut rng)
            .is_err());
        let ok = new_coordinate(&VivaldiConfig::default());
        assert!(a
            .update("x", &ok, Duration::from_secs(11), &mut rng)
            .is_err());
    }
}
