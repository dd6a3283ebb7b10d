//! What the readout tests against transformers share: the sequences of a conversation list in
//! the reference generators' order and their comparison with the reference instances.

use bindscope_geb::readout::chat::{ChatFormat, IGNORE, Mode, Sequence};
use bindscope_geb::readout::conversation::Conversation;
use serde_json::Value;

/// Every sequence of `convs` in the generators' order (per conversation: visual-only with one
/// slot, then the VL-joint turns with two), with its mode and conversation index.
pub fn sequences(fmt: &ChatFormat, convs: &[Conversation]) -> Vec<(Mode, usize, Sequence)> {
    let mut out = Vec::new();
    for (ci, c) in convs.iter().enumerate() {
        for (mode, slots) in [(Mode::VisualOnly, 1), (Mode::VlJoint, 2)] {
            for s in fmt.sequences(c, mode, slots).unwrap() {
                out.push((mode, ci, s));
            }
        }
    }
    out
}

fn ints(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// Checks `got` against the reference `instances` (`mode`, `conversation`, `turn`,
/// `input_ids`, `assistant_mask` each) one by one: the same ids, labels equal to the ids
/// exactly where transformers' assistant mask is 1, and the mode's slots holding the slot token.
/// Returns the number of supervised tokens.
pub fn check_instances(
    fmt: &ChatFormat,
    got: &[(Mode, usize, Sequence)],
    instances: &[Value],
) -> usize {
    assert_eq!(got.len(), instances.len(), "instances");
    let mut supervised = 0;
    for ((mode, ci, s), w) in got.iter().zip(instances) {
        let label = format!("{mode:?} conversation {ci} turn {:?}", s.turn);
        assert_eq!(serde_json::to_value(mode).unwrap(), w["mode"], "{label}");
        assert_eq!(w["conversation"].as_u64(), Some(*ci as u64), "{label}");
        assert_eq!(w["turn"].as_u64().map(|t| t as usize), s.turn, "{label}");
        let ids: Vec<u64> = s.input_ids.iter().map(|&i| u64::from(i)).collect();
        assert_eq!(ids, ints(&w["input_ids"]), "{label}: ids");
        let mask: Vec<bool> = ints(&w["assistant_mask"]).iter().map(|&m| m == 1).collect();
        let ours: Vec<bool> = s.labels.iter().map(|&l| l != IGNORE).collect();
        assert_eq!(ours, mask, "{label}: assistant mask");
        for (&l, &id) in s.labels.iter().zip(&s.input_ids) {
            assert!(
                l == IGNORE || l == i64::from(id),
                "{label}: label is not the id"
            );
        }
        let slots = if *mode == Mode::VisualOnly { 1 } else { 2 };
        assert_eq!(s.slots.len(), slots, "{label}: slots");
        for &p in &s.slots {
            assert_eq!(s.input_ids[p], fmt.embed_pad_id(), "{label}: slot");
        }
        supervised += ours.iter().filter(|&&m| m).count();
    }
    supervised
}
