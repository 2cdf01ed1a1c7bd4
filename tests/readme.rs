//! The workspace README's front door: its example is `examples/quickstart.rs` (which
//! `cargo run --example quickstart` builds and the examples crate's doc tests compile from the
//! README), and it stays short.

use std::path::Path;

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines of the first ```` ```rust ```` block (any attributes after `rust`).
fn first_rust_block(markdown: &str) -> String {
    let mut lines = markdown.lines().skip_while(|l| !l.starts_with("```rust"));
    assert!(lines.next().is_some(), "README.md has no ```rust block");
    let block: Vec<&str> = lines.take_while(|l| !l.starts_with("```")).collect();
    block.join("\n")
}

/// The example's code: the file without its leading `//!` lines and the blank line after them.
fn code_of_example(source: &str) -> String {
    let code: Vec<&str> = source
        .lines()
        .skip_while(|l| l.starts_with("//!"))
        .skip_while(|l| l.trim().is_empty())
        .collect();
    code.join("\n")
}

#[test]
fn the_readme_example_is_the_quickstart() {
    let readme = first_rust_block(&read("README.md"));
    let quickstart = code_of_example(&read("examples/quickstart.rs"));
    assert!(
        readme.trim_end() == quickstart.trim_end(),
        "README.md's first ```rust block differs from examples/quickstart.rs (after its //! \
         lines): copy one into the other.\n--- README.md\n{readme}\n--- examples/quickstart.rs\n{quickstart}"
    );
}

#[test]
fn the_readme_has_at_most_150_lines() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 150,
        "README.md has {lines} lines; at most 150 (figures go to benches/README.md, designs to docs/)"
    );
}
