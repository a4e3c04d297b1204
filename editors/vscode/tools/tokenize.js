// Tokenizes files with the checked-in TextMate grammar through VS Code's own engine
// (vscode-textmate + vscode-oniguruma, as the editor runs it), and reports any
// character no rule of the grammar matched (scoped only `source.eair`) outside
// whitespace, and any line that ends inside a string. The test suite does the same
// with a Python port of the engine (tests/test_textmate.py); this is the check against
// the real one:
//
//   npm install --no-save vscode-textmate vscode-oniguruma   # in editors/vscode
//   node tools/tokenize.js ../../worlds/*.eair ../../eairdsl/stdlib/*.eair
//
// Prints one line per file and a total; exits 1 if any file has an unmatched character.
"use strict";
const fs = require("fs");
const path = require("path");
const vsctm = require("vscode-textmate");
const oniguruma = require("vscode-oniguruma");

const grammarPath = path.join(__dirname, "..", "syntaxes", "eair.tmLanguage.json");
const wasm = fs.readFileSync(
  path.join(path.dirname(require.resolve("vscode-oniguruma")), "onig.wasm")
);

async function main(files) {
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new vsctm.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (patterns) => new oniguruma.OnigScanner(patterns),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async (scopeName) =>
      scopeName === "source.eair"
        ? vsctm.parseRawGrammar(fs.readFileSync(grammarPath, "utf8"), grammarPath)
        : null,
  });
  const grammar = await registry.loadGrammar("source.eair");
  let bad = 0;
  let tokens = 0;
  for (const file of files) {
    const lines = fs.readFileSync(file, "utf8").split("\n");
    let state = vsctm.INITIAL;
    let unmatched = 0;
    lines.forEach((line, number) => {
      const result = grammar.tokenizeLine(line, state);
      for (const token of result.tokens) {
        tokens += 1;
        const text = line.slice(token.startIndex, token.endIndex);
        if (token.scopes.length === 1 && text.trim() !== "") {
          unmatched += 1;
          if (unmatched <= 3) console.log(`${file}:${number + 1}: unmatched ${JSON.stringify(text)}`);
        }
      }
      state = result.ruleStack;
    });
    const open = state.depth > 1;
    if (unmatched || open) bad += 1;
    console.log(`${file}: ${lines.length} lines, ${unmatched} unmatched${open ? ", ends inside a rule" : ""}`);
  }
  console.log(`${files.length} files, ${tokens} tokens, ${bad} with problems`);
  process.exit(bad ? 1 : 0);
}

main(process.argv.slice(2));
