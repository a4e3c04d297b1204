// Starts `eairc lsp` (the command is the setting eair.server.command) for .eair files.
// Highlighting needs none of this: it is the TextMate grammar in syntaxes/.
"use strict";
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const [command, ...args] = vscode.workspace
    .getConfiguration("eair")
    .get("server.command", ["eairc", "lsp"]);
  client = new LanguageClient(
    "eair",
    "EAIR language server",
    { command, args },
    { documentSelector: [{ scheme: "file", language: "eair" }] }
  );
  context.subscriptions.push({ dispose: () => client && client.stop() });
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
