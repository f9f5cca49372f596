//! Helpers shared by the integration tests (`mod common;` in each test file that needs them).

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `f`, which must panic, and returns the panic message.
pub fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else {
        panic!("panic payload is not a string")
    }
}
