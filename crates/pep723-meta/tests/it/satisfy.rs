//! Whether pinned packages satisfy a dependency list without a resolver (`satisfied_by`): the
//! question an engine asks before it builds an environment for a list spelled anew.

use pep723_meta::satisfied_by;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn pins_that_satisfy_a_list_spelled_anew_or_a_subset() {
    let pins =
        strings(&["numpy==2.1.3", "pandas==2.2.3", "python-dateutil==2.9.0.post0", "six==1.17.0"]);
    let cases: &[(&[&str], Option<bool>)] = &[
        (&["numpy"], Some(true)),
        (&["numpy>=1.20,!=0.0.7"], Some(true)),
        (&["NumPy>=2"], Some(true)),
        (&["pandas", "six~=1.16"], Some(true)),
        (&["python_dateutil>=2.8"], Some(true)),
        (&["numpy<2"], Some(false)),
        (&["numpy", "scipy"], Some(false)),
        (&["six==1.16.0"], Some(false)),
        (&[], Some(true)),
        // What needs a resolver: extras, markers, URLs, what does not parse.
        (&["pandas[excel]"], None),
        (&["numpy; python_version >= '3.8'"], None),
        (&["six @ https://example.org/six-1.17.0-py2.py3-none-any.whl"], None),
        (&["numpy >="], None),
    ];
    for (requirements, expected) in cases {
        assert_eq!(satisfied_by(&strings(requirements), &pins), *expected, "{requirements:?}");
    }
}

#[test]
fn a_pin_under_a_marker_or_not_exact_is_not_taken_as_installed() {
    let pins = strings(&["colorama==0.4.6 ; sys_platform == 'win32'", "click>=8", "idna==3.10"]);
    assert_eq!(satisfied_by(&strings(&["colorama"]), &pins), None);
    assert_eq!(satisfied_by(&strings(&["click"]), &pins), None);
    assert_eq!(satisfied_by(&strings(&["idna"]), &pins), Some(true));
    // A pin that does not parse cannot tell; a pin of another name is not looked at.
    assert_eq!(satisfied_by(&strings(&["idna"]), &strings(&["idna=="])), None);
    assert_eq!(satisfied_by(&strings(&["six"]), &strings(&["idna==", "six==1.17.0"])), Some(true));
}
