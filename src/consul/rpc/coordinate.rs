//! Network coordinates: `Coordinate.Update` (`CoordinateUpdateRequest`), and the
//! `Coordinate` rows of `IndexedCoordinates` that `Coordinate.ListNodes` and
//! `Coordinate.Node` answer with.

use super::{each_field, write_request_field, Fields, QueryMeta};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::catalog::CoordinateUpdate;

/// Most dimensions of a coordinate's vector (serf uses 8).
pub const COORDINATE_DIMENSIONS_MAX: usize = 64;

/// serf's `coordinate.Coordinate`.
fn read_coordinate(r: &mut Reader, update: &mut CoordinateUpdate) -> Result<(), WireError> {
    each_field(r, |name, r| {
        match name {
            "Vec" => {
                let count = r.array_len()?;
                if count > COORDINATE_DIMENSIONS_MAX {
                    return Err(WireError::TooLarge {
                        what: "Coord.Vec",
                        limit: COORDINATE_DIMENSIONS_MAX,
                    });
                }
                update.vec = (0..count).map(|_| r.f64()).collect::<Result<_, _>>()?;
            }
            "Error" => update.error = r.f64()?,
            "Adjustment" => update.adjustment = r.f64()?,
            "Height" => update.height = r.f64()?,
            _ => return Ok(false),
        }
        Ok(true)
    })
}

/// `CoordinateUpdateRequest`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdateRequest<'a> {
    pub datacenter: &'a str,
    pub update: CoordinateUpdate,
    /// Whether the request carried a coordinate at all.
    pub has_coordinate: bool,
    pub token: &'a str,
}

impl<'a> UpdateRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<UpdateRequest<'a>, WireError> {
        let mut request = UpdateRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Node" => request.update.node = r.str()?.to_string(),
                "Segment" => request.update.segment = r.str()?.to_string(),
                "Coord" => {
                    if !r.try_nil()? {
                        request.has_coordinate = true;
                        read_coordinate(r, &mut request.update)?;
                    }
                }
                _ => return write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// Consul's `Coordinate.Update` refusals: a coordinate is required and must be finite
    /// with the server's dimensionality.
    pub fn validate(&self, dimensions: usize) -> Result<(), String> {
        if !self.has_coordinate {
            return Err("Coordinate update is missing its coordinate".to_string());
        }
        let u = &self.update;
        let finite = u.vec.iter().all(|x| x.is_finite())
            && u.error.is_finite()
            && u.adjustment.is_finite()
            && u.height.is_finite();
        if !finite || u.vec.len() != dimensions {
            return Err("invalid coordinate".to_string());
        }
        Ok(())
    }
}

impl UpdateRequest<'_> {
    /// The request as a client agent sends it (`PUT /v1/coordinate/update`): Consul's
    /// `CoordinateUpdateRequest`, its `Coord` serf's coordinate.
    pub fn encode(&self) -> Vec<u8> {
        let u = &self.update;
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 5);
        {
            let w = f.field("Coord");
            if self.has_coordinate {
                write_coordinate(
                    w,
                    &NodeCoordinate {
                        node: &u.node,
                        segment: &u.segment,
                        vec: &u.vec,
                        error: u.error,
                        adjustment: u.adjustment,
                        height: u.height,
                    },
                );
            } else {
                w.nil();
            }
        }
        f.field("Datacenter").str(self.datacenter);
        f.field("Node").str(&u.node);
        f.field("Segment").str(&u.segment);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// One node's coordinate, as the reply rows carry it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeCoordinate<'a> {
    pub node: &'a str,
    pub segment: &'a str,
    pub vec: &'a [f64],
    pub error: f64,
    pub adjustment: f64,
    pub height: f64,
}

fn write_coordinate(w: &mut Writer, c: &NodeCoordinate) {
    let mut f = Fields::new(w, 4);
    f.field("Adjustment").f64(c.adjustment);
    f.field("Error").f64(c.error);
    f.field("Height").f64(c.height);
    {
        let w = f.field("Vec");
        w.array_len(c.vec.len());
        for x in c.vec {
            w.f64(*x);
        }
    }
    f.finish();
}

/// `IndexedCoordinates`.
pub fn write_indexed_coordinates(w: &mut Writer, meta: &QueryMeta, rows: &[NodeCoordinate]) {
    meta.write_reply(w, &["Coordinates"], |_, w| {
        if rows.is_empty() {
            w.nil();
            return;
        }
        w.array_len(rows.len());
        for row in rows {
            let mut f = Fields::new(w, 4);
            write_coordinate(f.field("Coord"), row);
            f.field("Node").str(row.node);
            f.field("Partition").str("");
            f.field("Segment").str(row.segment);
            f.finish();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_request_reads_back_as_it_was_written() {
        let request = UpdateRequest {
            datacenter: "dc1",
            update: CoordinateUpdate {
                node: "n1".to_string(),
                segment: String::new(),
                vec: vec![0.5, -0.25],
                error: 1.5,
                adjustment: 0.0,
                height: 1e-5,
            },
            has_coordinate: true,
            token: "secret",
        };
        let body = request.encode();
        assert_eq!(UpdateRequest::decode(&body).unwrap(), request);
        let missing = UpdateRequest {
            has_coordinate: false,
            update: CoordinateUpdate {
                node: "n1".to_string(),
                ..CoordinateUpdate::default()
            },
            ..request.clone()
        };
        let body = missing.encode();
        let decoded = UpdateRequest::decode(&body).unwrap();
        assert!(!decoded.has_coordinate);
        assert!(decoded.validate(2).is_err());
    }
}
