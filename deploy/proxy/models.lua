-- GET /v1/models at the proxy (haproxy.cfg's OpenAI frontend, when the request names no
-- model): every model behind the proxy, in OpenAI's list shape, for clients that discover
-- models (Open WebUI, SDKs' models.list()).
--
-- The list is the proxy's own routing table: one entry per backend "openai:<name>" that
-- has a server the health checks hold UP (or unchecked), so a listed model is one the
-- proxy routes now, and a model whose scheduler is down or serves another model is left
-- out (its calls would be 503). No scheduler is asked (no fan-out): the answer needs no
-- credentials for the schedulers, does not wait for the slowest one, and costs them
-- nothing. Per-model details (max_model_len, ...) come from the model's scheduler:
-- GET /v1/models/<name> (routed by the proxy) or /<name>/v1/models.
-- The proxy checks no bearer tokens (the schedulers do), so this list is answered to
-- anyone who reaches the proxy's HTTP port.
--
-- Names are HAProxy backend names restricted by haproxy.cfg to [A-Za-z0-9._-], so they
-- need no JSON escaping; anything else is left out rather than escaped.

local started = os.time()

local function up(backend)
  for _, server in pairs(backend.servers) do
    local status = server:get_stats()["status"] or ""
    -- "UP", "UP 1/2" (going down), or "no check" (a server without health checks).
    if status:sub(1, 2) == "UP" or status == "no check" then
      return true
    end
  end
  return false
end

local function model_list()
  local names = {}
  for name, backend in pairs(core.backends) do
    local model = name:match("^openai:([A-Za-z0-9._-]+)$")
    if model and up(backend) then
      names[#names + 1] = model
    end
  end
  table.sort(names)
  local entries = {}
  for i, model in ipairs(names) do
    entries[i] = string.format(
      '{"id":"%s","object":"model","created":%d,"owned_by":"weft"}', model, started)
  end
  return '{"object":"list","data":[' .. table.concat(entries, ",") .. "]}"
end

core.register_service("weft_models", "http", function(applet)
  local body = model_list()
  applet:set_status(200)
  applet:add_header("content-type", "application/json")
  applet:add_header("cache-control", "no-cache")
  applet:add_header("content-length", tostring(#body))
  applet:start_response()
  applet:send(body)
end)
