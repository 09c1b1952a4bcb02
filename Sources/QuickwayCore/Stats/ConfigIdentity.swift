/// Which config a gateway is serving, for `/stats` (`config`) and `/metrics`
/// (`quickway_config_*`): the file, its SHA-256, the generation (1 at start, one more per
/// applied reload), when it was loaded, and how the last reload went.
struct ConfigIdentity {
    struct Reload {
        var ok: Bool
        /// Unix seconds.
        var at: Double
        /// The change lines (applied) or the validation errors (refused).
        var details: [String]
    }

    var path = ""
    var sha256 = ""
    var generation = 0
    var loadedAt = 0.0
    var lastReload: Reload?

    func json() -> String {
        var s = "{\"path\":\(JSONText.quoted(path)),\"sha256\":\(JSONText.quoted(sha256)),\"generation\":\(generation),"
        s += "\"loaded_at\":\(JSONText.quoted(StatsSnapshot.iso(loadedAt))),\"last_reload\":"
        if let r = lastReload {
            s += "{\"result\":\(r.ok ? "\"applied\"" : "\"invalid\""),\"at\":\(JSONText.quoted(StatsSnapshot.iso(r.at))),"
            s += "\"details\":[\(r.details.map(JSONText.quoted).joined(separator: ","))]}"
        } else {
            s += "null"
        }
        return s + "}"
    }
}
