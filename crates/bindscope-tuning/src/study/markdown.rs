//! `report.md` of `finetune train`: the accuracy table and the per-layer attention margins of
//! the three models.

use super::measure::Measurement;
use super::train::Results;

/// A finite number (what `report.json` writes as a number rather than `null`).
fn finite(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite())
}

/// A share as a percentage with one decimal, `—` when there is none.
fn pct(x: Option<f64>) -> String {
    finite(x).map_or("—".into(), |x| format!("{:.1}", 100.0 * x))
}

/// The markdown report of a finished run.
pub(super) fn report(r: &Results) -> String {
    let models: [(&str, &Measurement); 3] = [
        ("base", &r.base),
        ("finetuned (no LiNeS)", &r.finetuned_no_lines),
        ("finetuned + LiNeS", &r.finetuned_lines),
    ];
    let mut s = format!(
        "# Binding finetuning: {}\n\n{} training triplets, {} steps, {} trainable parameters; wall time {:.0} s (train {:.0} s).\n\n",
        r.model,
        r.train_triplets,
        r.steps,
        r.trainable_params,
        r.wall_seconds.total,
        r.wall_seconds.train
    );
    s += "| model | triplet acc test (%) | held-out anaphoric (%) | held-out respective (%) | SABER text→text (%) |\n|---|---|---|---|---|\n";
    for (label, m) in models {
        let acc = |set: &str| pct(m.triplet_accuracy.get(set).map(|a| a.accuracy));
        s += &format!(
            "| {label} | {} | {} | {} | {} |\n",
            acc("test"),
            acc("heldout_anaphoric"),
            acc("heldout_respective"),
            pct(m.saber_text_to_text.as_ref().map(|x| x.accuracy))
        );
    }
    s += "\nAttention binding margin per layer (test split):\n\n| model | per layer |\n|---|---|\n";
    for (label, m) in models {
        let layers: Vec<String> = m
            .attention_margin
            .get("test")
            .map(|a| {
                a.per_layer
                    .iter()
                    .map(|&x| finite(x).map_or("—".into(), |x| format!("{x:+.4}")))
                    .collect()
            })
            .unwrap_or_default();
        s += &format!("| {label} | {} |\n", layers.join(" "));
    }
    // As `report.json` writes it (an f32 widened to f64, shortest form; `null` if not finite).
    let diff = serde_json::to_value(r.merged_vs_adapter_max_abs_diff).unwrap_or_default();
    s += &format!("\nMerged checkpoint vs adapter model, max abs embedding difference: {diff}\n");
    s
}
