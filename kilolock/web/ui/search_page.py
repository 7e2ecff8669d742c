"""Resource search across the viewer's states (C{/ui/search}): which state
manages this type, address or attribute value, from the store's resource
query (the same search as C{/v1/native/resources})."""

from __future__ import annotations

from attrs import define
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.core.errors import BadRequest
from kilolock.rules.resources import ResourceMatch, ResourceQuery
from kilolock.rules.scope import scope_prefix
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import UiResource, Viewer, render_page, template
from kilolock.web.ui.params import resource_url, state_url, text
from kilolock.web.ui.states_page import labelled

#: The most results a search shows.
SEARCH_LIMIT = 200


@define(slots=False, eq=False)
class SearchView(Element):
    loader = template("search")

    fields: dict[str, str]
    matches: list[ResourceMatch] | None

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        if self.matches is None:
            count = "Give a type, an address pattern or an attribute."
        elif len(self.matches) >= SEARCH_LIMIT:
            count = f"The first {SEARCH_LIMIT} resources found (narrow the search for more)."
        else:
            count = f"{format.plural(len(self.matches), 'resource')} found."
        return tag.fillSlots(count=count, **self.fields)

    @renderer
    def results(self, request: Request, tag: Tag) -> Tag:
        if not self.matches:
            return tag(tags.tr(tags.td("Nothing found.", colspan="5")))
        return tag([tags.tr(
            labelled(tags.td(tags.a(match.state_path, href=state_url(match.state_path))),
                     "State"),
            labelled(tags.th(tags.a(tags.code(match.resource.address, class_="address"),
                                    href=resource_url(match.state_path,
                                                      match.resource.address)),
                             scope="row"), "Address"),
            labelled(tags.td(tags.code(match.resource.type)), "Type"),
            labelled(tags.td(match.resource.module or "(root)"), "Module"),
            labelled(tags.td(format.provider(match.resource.provider)), "Provider"))
            for match in self.matches])


class SearchPage(UiResource):
    """C{GET /ui/search?type=&address=&attribute=PATH=VALUE}."""

    route = BASE_PATH + "/search"
    section = BASE_PATH + "/search"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        fields = {name: text(request, name) for name in ("type", "address", "attribute")}
        matches = None
        if any(fields.values()):
            attribute = None
            if fields["attribute"]:
                path, separator, value = fields["attribute"].partition("=")
                if not separator or not path:
                    raise BadRequest("an attribute is PATH=VALUE, e.g. tags.Name=web")
                attribute = (path, value)
            query = ResourceQuery(type=fields["type"] or None,
                                  address=fields["address"] or None, attribute=attribute,
                                  path_prefix=scope_prefix(viewer.principal),
                                  limit=SEARCH_LIMIT)
            matches = await self.lane.store.query_resources(viewer.principal.tenant, query)
        return await render_page(request, self.dashboard, viewer, "Search resources",
                                 SearchView(fields, matches), section=self.section)
