-- A smoke check of `eairc lsp` from a real editor: headless Neovim (0.7 or newer, the
-- client API it has) opens worlds/d1.eair, misspells a tool, and asks for hover,
-- definition, completion after `e.` and formatting. From the repository root:
--
--   EAIRC=$(command -v eairc) nvim --headless -n -u NONE -c "luafile editors/neovim/smoke.lua"
--   cat smoke-lsp.txt
--
-- On 2026-12-03 with Debian's Neovim 0.7.2: initialized; E301 on the misspelling at
-- 287:8 (and W701 for the tool it left unused); hover of `propagation` showed the
-- lever from stdlib/delegation.eair; definition went to delegation.eair 20:6; completion
-- after `e.` listed employee's fields; formatting a formatted file gave 0 edits.
local out = {}
local function say(s) table.insert(out, s) end
local eairc = os.getenv("EAIRC")
vim.cmd("edit worlds/d1.eair")
local buf = vim.api.nvim_get_current_buf()
local id = vim.lsp.start_client({ name = "eairc", cmd = { eairc, "lsp" }, root_dir = vim.fn.getcwd() })
vim.lsp.buf_attach_client(buf, id)
vim.wait(20000, function() return #vim.lsp.get_active_clients() > 0 and vim.lsp.get_client_by_id(id).initialized end)
local client = vim.lsp.get_client_by_id(id)
say("initialized: " .. tostring(client and client.initialized))
local caps = client.server_capabilities
say("hover " .. tostring(caps.hoverProvider) .. " definition " .. tostring(caps.definitionProvider) .. " completion " .. tostring(caps.completionProvider ~= nil) .. " formatting " .. tostring(caps.documentFormattingProvider))
-- diagnostics after an edit introducing a misspelling
local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
local target
for i, l in ipairs(lines) do if l:find("^  tools directory_lookup") then target = i; break end end
vim.api.nvim_buf_set_lines(buf, target - 1, target, false, { (lines[target]:gsub("directory_lookup", "directory_lookp", 1)) })
vim.wait(15000, function() return #vim.diagnostic.get(buf) > 0 end)
for _, d in ipairs(vim.diagnostic.get(buf)) do say(string.format("diagnostic %d:%d %s %s", d.lnum, d.col, d.code or "", (d.message:gsub("\n.*", "")))) end
vim.api.nvim_buf_set_lines(buf, target - 1, target, false, { lines[target] })
local function pos(pattern, offset)
  for i, l in ipairs(lines) do local s = l:find(pattern, 1, true) if s then return { line = i - 1, character = s - 1 + (offset or 0) } end end
end
local uri = vim.uri_from_bufnr(buf)
local function req(method, p)
  local r = vim.lsp.buf_request_sync(buf, method, p, 15000)
  return r and r[id] and r[id].result
end
local h = req("textDocument/hover", { textDocument = { uri = uri }, position = pos("propagation = true", 2) })
say("hover: " .. (h and (h.contents.value:gsub("\n", " | ")) or "nil"))
local d = req("textDocument/definition", { textDocument = { uri = uri }, position = pos("propagation = true", 2) })
say("definition: " .. (d and d[1] and (d[1].uri .. " " .. d[1].range.start.line .. ":" .. d[1].range.start.character) or "nil"))
local c = req("textDocument/completion", { textDocument = { uri = uri }, position = pos("where e.name", 8) })
local labels = {}
for _, it in ipairs((c and (c.items or c)) or {}) do table.insert(labels, it.label) end
say("completion after e.: " .. table.concat(labels, ","))
local f = req("textDocument/formatting", { textDocument = { uri = uri }, options = { tabSize = 2, insertSpaces = true } })
say("formatting edits on a formatted file: " .. tostring(f and #f))
vim.fn.writefile(out, "smoke-lsp.txt")
vim.cmd("qa!")
