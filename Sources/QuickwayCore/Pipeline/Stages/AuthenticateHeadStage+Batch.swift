/// Authentication of a batch call (spec/batch.md): the envelope was verified (signature
/// over the whole envelope, nonce claimed) before its calls were made, so a call has no
/// credentials of its own (the envelope reader refuses `Authorization` in a call) and
/// carries the envelope's key instead, checked against the call's own route:
///
/// - `auth: off`: no key goes upstream, as for a direct call;
/// - `required` / `optional`: the key is the call's verified key (`X-Quickway-Key`, the
///   key's limits, quota and cache scope), refused per call if the key is no longer
///   configured or disabled; an unsigned envelope's call is anonymous, which `required`
///   refuses (401 `auth_missing`) and `optional` lets through;
/// - any other mode is refused for the call: fail closed for a scheme an envelope's key
///   cannot stand for.
///
/// The call's target is then treated as a signed call's: a raw `+` is refused and the
/// canonical query goes upstream, so a backend reads a batch call as it reads the same
/// call signed directly.
extension AuthenticateHeadStage {
    func runBatchCall(_ ctx: ProxyContext, _ route: Route, _ origin: BatchCallOrigin) -> StageResult {
        let mode = route.config.auth
        if mode == .off { return .next }
        let exchange = ctx.exchange
        guard mode == .required || mode == .optional else {
            return .refuse(.authMissing, "route \(route.config.name) takes auth \(mode.rawValue), which a batch envelope's identity does not meet: call it directly")
        }
        exchange.authChallenge = authenticator?.schemeName
        guard let keyId = origin.keyId else {
            if mode == .optional { return .next }
            return .refuse(.authMissing, "route \(route.config.name) needs a signed request, and the batch envelope was not signed")
        }
        if let auth = authenticator, auth.keys[keyId]?.disabled != false {
            return .refuse(.authUnknownKey, "unknown or disabled key \(keyId)")
        }
        if exchange.head.rawPlusInQuery {
            return .refuse(.badRequest, "a raw + in the query of a signed call is ambiguous: send %2B for a plus, %20 for a space")
        }
        if let refusal = Self.canonicalTarget(ctx) { return refusal }
        exchange.authKeyId = keyId
        return .next
    }
}
