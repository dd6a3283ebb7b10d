//! The "Fidelity and hardening" checks through the CLI, one test binary (each module is one
//! area): transparency (`images`), `--dtype keep` and load errors (`dtype`), text and `embed`
//! hardening (`text`), JER and binding-study validation (`runs`), accepted nonsense and plots
//! (`checks_plots`), the Hub path, provenance and progress (`hub`), and the checkpoint layouts
//! transformers 4 and 5 write (`layouts`).

mod checks_plots;
mod dtype;
mod hub;
mod images;
mod layouts;
mod runs;
mod text;
