// Types of the guarded entry point (index.js): the same functions and types as the generated
// bindings, whose interfaces are written by hand in the Rust crate (typescript_custom_section).
export {
  Options, Position, Range, Offsets, TextEdit, Severity, Fix, RelatedInformation, Diagnostic, Spanned,
  SandboxConfig, Metadata, BlockInfo, ParseResult, EditOk, EditError, EditErr, EditResult, SandboxKey,
  parse, validate, addDependency, removeDependency, setRequiresPython, unsetRequiresPython,
  addSandboxDependency, removeSandboxDependency, setSandbox, unsetSandbox, initBlock,
} from './node/pep723_meta';
