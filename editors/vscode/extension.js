// Starts `eairc lsp` (the command is the setting eair.server.command) for .eair files
// and their card templates (.md.j2). Highlighting of .eair needs none of this: it is the
// TextMate grammar in syntaxes/; the server adds semantic tokens (what each name is).
"use strict";
const vscode = require("vscode");
const { LanguageClient } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const settings = vscode.workspace.getConfiguration("eair");
  const [command, ...args] = settings.get("server.command", ["eairc", "lsp"]);
  client = new LanguageClient(
    "eair",
    "EAIR language server",
    { command, args },
    {
      documentSelector: [
        { scheme: "file", language: "eair" },
        { scheme: "file", language: "eair-card" },
      ],
      // a module, data file or card changed on disk (another editor, git checkout):
      // the server checks the open worlds again
      synchronize: {
        fileEvents: vscode.workspace.createFileSystemWatcher(
          "**/*.{eair,j2,json,jsonl,csv,md}"
        ),
      },
      initializationOptions: {
        diagnosticsDelay: settings.get("diagnostics.delay", 0.25),
      },
    }
  );
  context.subscriptions.push({ dispose: () => client && client.stop() });
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
