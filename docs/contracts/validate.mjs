// Parses asyncapi.yaml (and the JSON Schemas it references) with the AsyncAPI parser and
// exits 1, printing each diagnostic of severity error, when the document is not valid.
// Usage: node validate.mjs [path/to/asyncapi.yaml]   (npm ci first)
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Parser, fromFile, DiagnosticSeverity } from '@asyncapi/parser';

const here = path.dirname(fileURLToPath(import.meta.url));
const file = path.resolve(process.argv[2] ?? path.join(here, 'asyncapi.yaml'));

const where = (d) => (d.path && d.path.length ? d.path.join('.') : '(document)');
const { document, diagnostics } = await fromFile(new Parser(), file).parse();
const errors = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Error);
const warnings = diagnostics.filter((d) => d.severity === DiagnosticSeverity.Warning);
for (const d of errors) {
  console.error(`error ${d.code} at ${where(d)}: ${d.message}`);
}
for (const d of warnings) {
  console.log(`warning ${d.code} at ${where(d)}: ${d.message}`);
}
if (errors.length > 0 || document === undefined) {
  console.error(`${path.relative(process.cwd(), file)}: not a valid AsyncAPI document ` +
                `(${errors.length} error(s))`);
  process.exit(1);
}
console.log(`${path.relative(process.cwd(), file)}: valid AsyncAPI ${document.version()} ` +
            `(${document.channels().length} channels, ${document.operations().length} ` +
            `operations, ${document.messages().length} messages; ${warnings.length} warning(s))`);
