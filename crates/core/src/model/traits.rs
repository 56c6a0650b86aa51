//! Node traits: Ironic's naming rules. A trait is one of the standard names of os-traits
//! (embedded from `os_traits.txt`, generated from the PyPI package; see its header) or a custom
//! `CUSTOM_[A-Z0-9_]+`; at most [`MAX_LENGTH`] characters, at most [`MAX_PER_NODE`] per node.
//! Pure.

use std::collections::BTreeSet;

use super::ValueError;

/// The most traits a node may have (Ironic's limit).
pub const MAX_PER_NODE: usize = 50;
/// The longest trait name.
pub const MAX_LENGTH: usize = 255;

const STANDARD: &str = include_str!("os_traits.txt");

/// Whether `name` is a standard os-traits name.
pub fn is_standard(name: &str) -> bool {
    STANDARD.lines().any(|line| !line.starts_with('#') && line == name)
}

/// Checks one trait name.
pub fn check(name: &str) -> Result<(), ValueError> {
    if name.is_empty() || name.len() > MAX_LENGTH {
        return Err(ValueError(format!(
            "Invalid trait {name:?}: a trait has 1 to {MAX_LENGTH} characters."
        )));
    }
    let custom = name.strip_prefix("CUSTOM_").is_some_and(|rest| {
        !rest.is_empty()
            && rest.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    });
    if custom || is_standard(name) {
        Ok(())
    } else {
        Err(ValueError(format!(
            "Invalid trait {name:?}: a trait must be a standard trait name (os-traits) or a custom trait matching CUSTOM_[A-Z0-9_]+."
        )))
    }
}

/// Checks a whole set of traits for a node: each name, and their count; answers them sorted
/// without duplicates.
pub fn check_set<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Vec<String>, ValueError> {
    let mut set = BTreeSet::new();
    for name in names {
        check(name)?;
        set.insert(name.to_owned());
    }
    if set.len() > MAX_PER_NODE {
        return Err(ValueError(format!(
            "A node can have at most {MAX_PER_NODE} traits; this request gives it {}.",
            set.len()
        )));
    }
    Ok(set.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_and_custom_names() {
        assert!(check("HW_CPU_X86_AVX2").is_ok());
        assert!(check("COMPUTE_NODE").is_ok());
        assert!(check("CUSTOM_RAID_1").is_ok());
        assert!(check("CUSTOM_").is_err());
        assert!(check("CUSTOM_lower").is_err());
        assert!(check("HW_NOT_A_TRAIT").is_err());
        assert!(check("").is_err());
        assert!(check(&format!("CUSTOM_{}", "A".repeat(250))).is_err());
        assert!(!is_standard(
            "# The standard trait names of os-traits 3.9.0 (PyPI), one a line, sorted."
        ));
        let many: Vec<String> = (0..51).map(|i| format!("CUSTOM_T{i}")).collect();
        assert!(check_set(many.iter().map(String::as_str)).is_err());
        assert_eq!(
            check_set(["CUSTOM_B", "CUSTOM_A", "CUSTOM_B"]).unwrap(),
            ["CUSTOM_A", "CUSTOM_B"]
        );
    }
}
