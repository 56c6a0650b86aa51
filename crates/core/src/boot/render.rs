//! Prints a [`BootContext`] through minijinja templates into an iPXE script.
//!
//! Templates are embedded in the binary and can be overridden, file by file, from a directory.
//! Undefined variables are errors. In `.ipxe` templates every printed value goes through
//! [`check_script_value`]: a value with whitespace, a control character, `$`, `#`, a quote or a
//! trailing backslash is refused, so no value can add a line, an argument or a `${...}`
//! expansion. Pure apart from reading override files when a template is first loaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use minijinja::value::Value;
use minijinja::{
    AutoEscape, Environment, Error, ErrorKind, Output, State, UndefinedBehavior,
    syntax::SyntaxConfig,
};

use super::context::BootContext;
use crate::model::check_script_value;

/// The built-in templates, by name.
pub const BUILTIN_TEMPLATES: &[(&str, &str)] = &[
    ("ipxe/san.ipxe.j2", include_str!("../../../../templates/ipxe/san.ipxe.j2")),
    ("ipxe/nfs.ipxe.j2", include_str!("../../../../templates/ipxe/nfs.ipxe.j2")),
    ("ipxe/hba.ipxe.j2", include_str!("../../../../templates/ipxe/hba.ipxe.j2")),
    ("ipxe/default.ipxe.j2", include_str!("../../../../templates/ipxe/default.ipxe.j2")),
    ("ipxe/boot.ipxe.j2", include_str!("../../../../templates/ipxe/boot.ipxe.j2")),
    ("ipxe/deploy.ipxe.j2", include_str!("../../../../templates/ipxe/deploy.ipxe.j2")),
];

/// Why a script could not be printed.
#[derive(Debug, thiserror::Error)]
#[error("rendering {template}: {message}")]
pub struct RenderError {
    pub template: String,
    pub message: String,
}

/// The template environment. Cheap to clone and share between threads.
#[derive(Debug, Clone)]
pub struct Templates {
    env: Arc<Environment<'static>>,
}

impl Templates {
    /// The built-in templates, with files in `override_dir` (if any) taking precedence.
    pub fn new(override_dir: Option<&Path>) -> Result<Templates, RenderError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build();
        env.set_syntax(
            syntax
                .map_err(|e| RenderError { template: "(syntax)".into(), message: e.to_string() })?,
        );
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_auto_escape_callback(|name| {
            if name.contains(".ipxe") {
                AutoEscape::Custom("ipxe".into())
            } else {
                minijinja::default_auto_escape_callback(name)
            }
        });
        env.set_formatter(ipxe_formatter);
        let override_dir: Option<PathBuf> = override_dir.map(Path::to_path_buf);
        env.set_loader(move |name| load_template(override_dir.as_deref(), name));
        let templates = Templates { env: Arc::new(env) };
        for (name, _) in BUILTIN_TEMPLATES {
            templates
                .env
                .get_template(name)
                .map_err(|e| RenderError { template: (*name).into(), message: describe(&e) })?;
        }
        Ok(templates)
    }

    /// Renders the generic `boot.ipxe` every iPXE client chains to: it looks up each of the
    /// first `nics` NICs' MAC at `public_url`.
    /// `peers`: other instances' boot URLs, tried after `public_url` for each NIC (a value that
    /// is not a plain script value is left out).
    pub fn render_generic(
        &self,
        public_url: &str,
        peers: &[String],
        nics: u32,
    ) -> Result<String, RenderError> {
        let name = "ipxe/boot.ipxe.j2";
        let failed = |e: Error| RenderError { template: name.into(), message: describe(&e) };
        let template = self.env.get_template(name).map_err(failed)?;
        let nics: Vec<u32> = (0..nics).collect();
        let peers: Vec<String> = peers
            .iter()
            .filter(|p| *p != public_url && crate::model::check_script_value(p).is_ok())
            .cloned()
            .collect();
        template
            .render(minijinja::context! { public_url => public_url, peers => peers, nics => nics })
            .map_err(failed)
    }

    /// Renders one context with the template it names.
    pub fn render(&self, context: &BootContext) -> Result<String, RenderError> {
        let failed =
            |e: Error| RenderError { template: context.template.into(), message: describe(&e) };
        let template = self.env.get_template(context.template).map_err(failed)?;
        template.render(minijinja::value::Serde(context)).map_err(failed)
    }
}

fn load_template(override_dir: Option<&Path>, name: &str) -> Result<Option<String>, Error> {
    if let Some(dir) = override_dir {
        let confined = name.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
        if confined {
            match std::fs::read_to_string(dir.join(name)) {
                Ok(source) => return Ok(Some(source)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        format!("cannot read override template: {e}"),
                    ));
                }
            }
        }
    }
    Ok(BUILTIN_TEMPLATES.iter().find(|(n, _)| *n == name).map(|(_, source)| (*source).to_owned()))
}

fn describe(error: &Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

fn ipxe_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    if !matches!(state.auto_escape(), AutoEscape::Custom(name) if name == "ipxe") {
        return minijinja::escape_formatter(out, state, value);
    }
    if value.is_undefined() || value.is_none() {
        return Err(Error::new(
            ErrorKind::UndefinedError,
            "a missing value cannot appear in an iPXE script",
        ));
    }
    // Strings (nearly every printed value) are checked and written where they are; only other
    // kinds are formatted first.
    let formatted;
    let text = match value.as_str() {
        Some(text) => text,
        None => {
            formatted = value.to_string();
            &formatted
        }
    };
    if !value.is_safe() {
        check_script_value(text).map_err(|m| Error::new(ErrorKind::InvalidOperation, m))?;
    }
    out.write_str(text).map_err(Error::from)
}
