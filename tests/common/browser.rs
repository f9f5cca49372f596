//! Headless Chromium for the memory page's tests: finds the browser and Node, runs
//! `tests/browser/check_page.mjs` on a list of jobs (one browser for all of them) and
//! returns its report. Outside CI a missing browser skips the test with a message; in CI
//! (`CI=true`) it fails it: `.ci/run` installs Debian's `chromium`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The most a run of the driver may take before it is ended.
const LIMIT: Duration = Duration::from_secs(120);

/// The browser and Node, if both are here.
pub struct Tools {
    chromium: PathBuf,
    node: PathBuf,
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// Chromium (`NEBULA_CHROMIUM`, else `chromium` or `chromium-browser` on the path) and
/// Node; `None`, with a message, when one is missing outside CI.
///
/// # Panics
/// In CI (`CI=true`) when one is missing.
pub fn tools() -> Option<Tools> {
    let chromium = std::env::var_os("NEBULA_CHROMIUM")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| on_path(&["chromium", "chromium-browser"]));
    let node = on_path(&["node"]);
    match (chromium, node) {
        (Some(chromium), Some(node)) => Some(Tools { chromium, node }),
        (chromium, node) => {
            let missing = match (chromium, node) {
                (None, None) => "Chromium and Node",
                (None, _) => "Chromium",
                _ => "Node",
            };
            let message = format!(
                "the memory page's browser test needs {missing}: `apt-get install chromium` \
                 (Debian's package; or NEBULA_CHROMIUM=<path>) and Node.js on the path"
            );
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{message} (CI must run it: .ci/run installs Chromium)"
            );
            eprintln!("SKIPPED: {message}");
            None
        }
    }
}

/// A directory of the test's own for pages and screenshots, kept for a person to look at
/// (under the target directory).
pub fn out_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Tools {
    /// Runs the driver on `jobs` (see `tests/browser/check_page.mjs`), while `tick` is
    /// called every few milliseconds (a live app's frames); returns its report.
    ///
    /// # Panics
    /// If the driver fails or outlives [`LIMIT`], with its output.
    pub fn run(&self, dir: &Path, jobs: Value, mut tick: impl FnMut()) -> Value {
        let spec = serde_json::json!({
            "chromium": self.chromium,
            "timeout_ms": 90_000,
            "jobs": jobs,
        });
        let spec_path = dir.join("jobs.json");
        std::fs::write(&spec_path, spec.to_string()).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/check_page.mjs");
        let out_path = dir.join("report.json");
        let err_path = dir.join("driver.stderr");
        let mut child = Command::new(&self.node)
            .arg(&script)
            .arg(&spec_path)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .expect("starting node");
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > LIMIT {
                child.kill().ok();
                child.wait().ok();
                panic!("the browser driver ran over {LIMIT:?}: ended");
            }
            tick();
            std::thread::sleep(Duration::from_millis(5));
        };
        let out = std::fs::read_to_string(&out_path).unwrap();
        let err = std::fs::read_to_string(&err_path).unwrap();
        assert!(
            status.success(),
            "the browser driver failed ({status}):\n{out}\n{err}"
        );
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
    }
}
